"""Which image a file is (orchestrator/containers/identity.py): the labels parsed from a SIF's
descriptors, the local image's identity with its stamp, the record a push writes beside the
image it installed, and the local record of pushes. Through push, with a fake remote:
tests/unit/containers/test_push.py."""

from __future__ import annotations

import json
import os
import socket

from support import make_sif, reader, sif_labels

from orchestrator.containers import identity


def test_sif_identity_reads_the_labels_and_the_build_time():
    got = identity.sif_identity(reader(make_sif(sif_labels("lumi", "a"))))
    assert got == identity.Identity("lumi", f"sha256:{'a' * 64}", "2026-11-25T20:01:38+00:00")
    assert got.describe() == "image 'lumi' (built 2026-11-25T20:01:38+00:00, content sha256:aaaaaaaaaaaa)"


def test_sif_identity_of_files_it_cannot_name():
    assert identity.sif_identity(reader(b"an older image")) is None
    assert identity.sif_identity(reader(os.urandom(1 << 16))) is None
    assert identity.sif_identity(reader(make_sif(None))) == identity.Identity(None, None, "2026-11-25T20:01:38+00:00")  # a SIF, no labels
    # Labels beyond the 64 KiB a probe reads (a long definition): not in reach, so unknown.
    big = make_sif(sif_labels("lumi"), definition=40_000)
    assert identity.sif_identity(reader(big[: identity.HEAD_BYTES])) is None
    assert identity.sif_identity(reader(big)).name == "lumi"
    assert identity.sif_identity(reader(make_sif(sif_labels("lumi"))[:8000])) is None  # the table cut off


def test_identify_a_local_image_by_its_labels_and_its_stamps_build_time(tmp_path):
    from orchestrator.containers import build

    image = tmp_path / "ci.sif"
    image.write_bytes(make_sif(sif_labels("ci")))
    assert identity.identify(image) == identity.Identity("ci", f"sha256:{'c' * 64}", "2026-11-25T20:01:38+00:00")
    st = image.stat()
    stamp = {
        "version": build.STAMP_VERSION,
        "name": "ci",
        "built_at": "2026-11-25T21:01:38+0100",
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
    }
    build.stamp_path(image).write_text(json.dumps(stamp))
    assert identity.identify(image).built_at == "2026-11-25T21:01:38+0100"
    unlabelled = tmp_path / "own.sif"
    unlabelled.write_bytes(b"not a sif")
    assert identity.identify(unlabelled) == identity.Identity(None)


# --- the record beside an installed image --------------------------------------------------------


def test_a_sidecar_names_the_file_beside_it_only_while_it_describes_it():
    ours = identity.Identity("ci", f"sha256:{'c' * 64}", "2026-11-25T20:01:38+00:00")
    text = identity.sidecar_text(ours, "a" * 64, 1234)
    assert "\n" not in text and text.isascii()
    record = json.loads(text)
    assert (record["size"], record["sha256"], record["pushed_from"]) == (1234, "a" * 64, socket.gethostname())
    assert identity.sidecar_identity(text, 1234, "a" * 64) == ours
    assert identity.sidecar_identity(text, 1234, None) == ours  # sha256 not known (another size): the size decides
    assert identity.sidecar_identity(text, 1235, None) is None  # the file was replaced since
    assert identity.sidecar_identity(text, 1234, "b" * 64) is None
    assert identity.sidecar_identity("{not json", 1234, None) is None
    assert identity.sidecar_identity(None, 1234, None) is None


def test_identity_at_trusts_the_sidecar_until_the_file_is_newer(tmp_path):
    dest = tmp_path / "o.sif"
    dest.write_bytes(make_sif(sif_labels("rocm")))
    sidecar = tmp_path / f"o.sif{identity.SIDECAR_SUFFIX}"
    assert identity.identity_at(dest, sidecar, dest.stat().st_size, None).name == "rocm"  # no sidecar: the labels
    sidecar.write_text(identity.sidecar_text(identity.Identity("lumi"), "a" * 64, dest.stat().st_size))
    os.utime(dest, ns=(0, sidecar.stat().st_mtime_ns - 1))
    assert identity.identity_at(dest, sidecar, dest.stat().st_size, None).name == "lumi"
    os.utime(dest, ns=(0, sidecar.stat().st_mtime_ns + 10**9))  # written after its record: the record is stale
    assert identity.identity_at(dest, sidecar, dest.stat().st_size, None).name == "rocm"
    dest.write_bytes(b"not a sif")
    assert identity.identity_at(dest, sidecar, dest.stat().st_size, None) == identity.Identity(None)


# --- where the local image was pushed ------------------------------------------------------------


def test_push_records_accumulate_and_a_broken_one_reads_as_none(tmp_path):
    image = tmp_path / "ci.sif"
    said: list[str] = []
    identity.record_push(image, "h:/a.sif", "a" * 64, "ci", said.append)
    identity.record_push(image, "h:/b.sif", "b" * 64, None, said.append)
    pushes = identity.read_pushes(image)
    assert said == [] and sorted(pushes) == ["h:/a.sif", "h:/b.sif"]
    assert (pushes["h:/b.sif"]["sha256"], pushes["h:/b.sif"]["name"]) == ("b" * 64, None)
    identity.pushes_path(image).write_text('{"h:/a.sif": "not a record", "h:/b.sif": {}}')
    assert identity.read_pushes(image) == {"h:/b.sif": {}}
    identity.pushes_path(image).write_text("[1, 2")
    assert identity.read_pushes(image) == {}


def test_a_push_record_that_cannot_be_written_is_a_note(tmp_path):
    image = tmp_path / "ci.sif"
    identity.pushes_path(image).mkdir()  # in the way of the record, for root too
    said: list[str] = []
    identity.record_push(image, "h:/a.sif", "a" * 64, "ci", said.append)
    assert len(said) == 1 and said[0].startswith(f"note: could not record the push in {identity.pushes_path(image)}: ")
    assert identity.read_pushes(image) == {}
