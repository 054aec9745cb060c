"""What `container list` and `container clean` find (orchestrator/containers/catalog.py): images
built with a fake runtime, push records, old images, stopped builds' leftovers, a build holding
its lock. The CLI: tests/unit/cli/test_container_commands.py; real images:
tests/integration/apptainer/test_container_verbs.py."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
from fakes import FakeRunner, ok

from orchestrator.containers import build, catalog, inputs, leftovers
from orchestrator.containers.images import ContainerError
from orchestrator.util.runner import Completed

NOW = 2_000_000_000.0


def fake_build(project: Path, name: str = "tiny", data: bytes = b"SIF image bytes") -> build.BuildResult:
    """`container build NAME` with a runtime that writes ``data`` as the image."""

    def apptainer(argv):
        if argv[1] != "--version":
            Path(argv[-2]).write_bytes(data)
        return Completed(tuple(argv), 0, "apptainer version 1.4.5\n", "")

    return build.build(project, name, FakeRunner(answers={"apptainer": apptainer, "git": ok("", rc=128)}, installed={"apptainer"}))


def by_name(project: Path, **kw) -> dict[str, catalog.Entry]:
    return {e.name: e for e in catalog.entries(project, **kw)}


@contextmanager
def building(folder: Path, name: str):
    """Hold image ``name``'s build lock, as a build in progress does."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f".{name}.sif.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


# --- list -------------------------------------------------------------------------------------


def test_images_not_built_yet(tiny):
    found = by_name(tiny, now=NOW)
    assert list(found) == ["site", "tiny"]
    tiny_entry = found["tiny"]
    assert (tiny_entry.state, tiny_entry.reason, tiny_entry.built) == ("not built", "no image yet", False)
    assert tiny_entry.current_hash == inputs.current_hash(tiny, "tiny")  # what a build would give
    assert tiny_entry.content_hash is tiny_entry.sif_sha256 is tiny_entry.size is tiny_entry.age_s is None
    assert tiny_entry.pushes == () and tiny_entry.pushed_here is None
    assert found["site"].state == "invalid" and "base image" in found["site"].reason and "does not exist" in found["site"].reason


def test_a_built_image_is_up_to_date_with_its_hashes_size_and_age(tiny):
    result = fake_build(tiny)
    sif = tiny / build.IMAGES_DIR / "tiny.sif"
    assert result.built and result.image == sif.absolute()
    entry = by_name(tiny, now=sif.stat().st_mtime + 90)["tiny"]
    assert (entry.state, entry.reason, entry.built) == ("up to date", None, True)
    assert entry.content_hash == entry.current_hash == result.content_hash
    assert entry.sif_sha256 == result.digest and entry.sif_sha256 != entry.content_hash
    assert entry.size == len(b"SIF image bytes") and entry.age_s == pytest.approx(90)
    assert entry.built_at == json.loads(build.stamp_path(sif).read_text())["built_at"]
    data = entry.as_json()
    assert data["state"] == "up to date" and data["built"] is True and data["sif_sha256"] == result.digest
    assert json.loads(json.dumps(data)) == data  # plain JSON


def test_a_change_makes_it_stale_and_says_what(tiny):
    fake_build(tiny)
    (tiny / "pkg" / "mod.py").write_text("x = 2\n")
    entry = by_name(tiny)["tiny"]
    assert (entry.state, entry.reason) == ("stale", "changed: pkg/mod.py")
    assert entry.current_hash != entry.content_hash
    (tiny / "pkg" / "mod.py").write_text("x = 1\n")  # reverted: up to date again, nothing rebuilt
    assert by_name(tiny)["tiny"].state == "up to date"


def test_an_image_file_replaced_since_its_build_is_stale(tiny):
    fake_build(tiny)
    sif = tiny / build.IMAGES_DIR / "tiny.sif"
    sif.write_bytes(b"another image of another size")
    entry = by_name(tiny)["tiny"]
    assert (entry.state, entry.reason) == ("stale", "the image file changed since it was built")


def test_an_image_without_a_stamp_is_stale(tiny):
    sif = tiny / build.IMAGES_DIR / "tiny.sif"
    sif.parent.mkdir(parents=True)
    sif.write_bytes(b"copied here by hand")
    entry = by_name(tiny)["tiny"]
    assert (entry.state, entry.reason, entry.size, entry.sif_sha256) == ("stale", "no stamp beside the image", 19, None)


def test_big_inputs_of_an_image_not_built_are_not_hashed(tiny, monkeypatch):
    base = tiny / "base.sif"
    with base.open("wb") as f:  # a sparse file of 16 MiB: a base image as far as hashing goes
        f.truncate(inputs.BIG_FILE)
    monkeypatch.setattr(inputs, "sha256_file", lambda p: pytest.fail(f"hashed {p} just to list an image not built"))
    entry = by_name(tiny)["site"]
    assert (entry.state, entry.current_hash) == ("not built", None)


def test_the_project_source_is_hashed_once_for_all_images(tiny, monkeypatch):
    (tiny / "containers" / "images.yaml").write_text(
        "a: {definition: tiny.def.j2, source: [pkg, pyproject.toml]}\nb: {definition: tiny.def.j2, source: [pkg, pyproject.toml]}\n"
    )
    seen = []
    real = inputs.digest_inputs
    monkeypatch.setattr(build, "digest_inputs", lambda todo, cache: (seen.extend(i.dest for i in todo), real(todo, cache))[1])
    found = by_name(tiny)
    assert found["a"].current_hash == inputs.current_hash(tiny, "a") and found["b"].current_hash == inputs.current_hash(tiny, "b")
    assert len(seen) == len(set(seen)) and "src/pkg/mod.py" in seen


def test_pushes_newest_first_and_whether_the_last_is_this_image(tiny):
    result = fake_build(tiny)
    sif = tiny / build.IMAGES_DIR / "tiny.sif"
    record = Path(f"{sif}.pushes.json")
    here = result.digest.removeprefix("sha256:")
    record.write_text(
        json.dumps(
            {
                "lumi:/project/p/tiny.sif": {"sha256": "0" * 64, "at": "2025-11-01T10:00:00+00:00", "name": "tiny"},
                "juwels:/p/tiny.sif": {"sha256": here, "at": "2025-11-20T10:00:00+00:00", "name": "tiny"},
            }
        )
    )
    entry = by_name(tiny)["tiny"]
    assert [p.target for p in entry.pushes] == ["juwels:/p/tiny.sif", "lumi:/project/p/tiny.sif"]
    assert entry.pushed_here is True
    record.write_text(json.dumps({"lumi:/x.sif": {"sha256": "0" * 64, "at": "2025-11-01T10:00:00+00:00", "name": "tiny"}}))
    assert by_name(tiny)["tiny"].pushed_here is False  # the image here was rebuilt since
    assert by_name(tiny)["tiny"].as_json()["pushes"][0]["target"] == "lumi:/x.sif"


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"host:/x": "not a mapping"}'])
def test_an_unreadable_push_record_counts_as_never_pushed(tiny, text):
    fake_build(tiny)
    Path(f"{tiny / build.IMAGES_DIR / 'tiny.sif'}.pushes.json").write_text(text)
    assert by_name(tiny)["tiny"].pushes == ()


def test_no_images_file_is_one_error_saying_what_to_do(tmp_path):
    for call in (catalog.entries, catalog.clean_plan):
        with pytest.raises(ContainerError, match="images.yaml: no such file") as err:
            call(tmp_path)
        assert "--project" in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_name_lists_the_images(tiny):
    with pytest.raises(ContainerError, match=r"no image 'nope' in .*images\.yaml; images: site, tiny$"):
        catalog.entry(tiny, "nope")


# --- clean ------------------------------------------------------------------------------------


def test_clean_finds_old_images_orphans_and_stopped_builds_and_removes_them(tiny):
    fake_build(tiny)
    folder = tiny / build.IMAGES_DIR
    kept = sorted(p.name for p in folder.iterdir())
    files = {
        "old.sif": b"o" * 5000,  # an image no longer in images.yaml, with what belongs to it
        "old.sif.json": b"{}",
        "old.build.log": b"log",
        "old.sif.pushes.json": b"{}",
        ".old.sif.lock": b"",
        ".old.sif.sha256": b"0" * 64,
        ".gone.sif.sha256": b"0" * 64,
        "gone.sif.json": b"{}",  # stamps, logs, records whose image is gone
        "gone.build.log": b"log",
        "tiny2.sif.pushes.json": b"{}",
        ".tiny.sif.a1b2c3.tmp": b"t" * 3000,  # a temporary image of an older build's naming
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    old = NOW - 3600
    os.utime(folder / ".tiny.sif.a1b2c3.tmp", (old, old))
    (folder / ".tiny.sif.json.x9y8.tmp").write_bytes(b"{}")  # written a moment ago: a write under way, left alone
    os.utime(folder / ".tiny.sif.json.x9y8.tmp", (NOW - 10, NOW - 10))
    pid = dead_pid()
    stopped = leftovers.make_build_dir(folder / f".build-tiny-{pid}")  # a killed build's folder
    (stopped / "tmp").mkdir()
    (stopped / "tmp" / "rootfs.bin").write_bytes(b"r" * 9000)
    (folder / f".tiny.sif.{pid}.tmp").write_bytes(b"i" * 7000)  # and its image: found once, by leftovers

    plan = catalog.clean_plan(tiny, now=NOW)
    listed = {p.name: what for p, _, what in plan.rows}
    assert set(listed) == set(files) | {f".build-tiny-{pid}", f".tiny.sif.{pid}.tmp"}, listed
    assert listed["old.sif"] == "old image (not in images.yaml)" and listed["old.sif.json"] == "its stamp"
    assert listed[".old.sif.sha256"] == "its sha256 cache" and listed[".gone.sif.sha256"] == "sha256 cache without an image"
    assert listed["gone.build.log"] == "build log without an image" and "process" in listed[f".build-tiny-{pid}"]
    assert len(plan.rows) == len(listed)  # nothing twice
    assert plan.total == sum(size for _, size, _ in plan.rows) >= 5000 + 3000 + 9000 + 7000
    assert plan.building == ()

    freed, skipped = catalog.remove(plan)
    assert freed == plan.total and skipped == []
    assert sorted(p.name for p in folder.iterdir()) == sorted([*kept, ".tiny.sif.json.x9y8.tmp"])
    assert by_name(tiny)["tiny"].state == "up to date"  # the image of images.yaml is untouched


def test_clean_keeps_what_a_running_build_is_writing(tiny):
    folder = tiny / build.IMAGES_DIR
    with building(folder, "tiny"):
        (folder / "tiny.build.log").write_text("# build started\n")  # a first build: no image yet
        (folder / ".tiny.sif.q1w2.tmp").write_bytes(b"half")
        os.utime(folder / ".tiny.sif.q1w2.tmp", (NOW - 3600, NOW - 3600))
        plan = catalog.clean_plan(tiny, now=NOW)
        assert plan.rows == [] and plan.building == ("tiny",)
    assert [p.name for p, _, _ in catalog.clean_plan(tiny, now=NOW).rows] == [".tiny.sif.q1w2.tmp", "tiny.build.log"]


def test_clean_skips_what_a_build_started_since_the_plan(tiny):
    folder = tiny / build.IMAGES_DIR
    folder.mkdir(parents=True)
    (folder / "tiny.build.log").write_text("an old failed build\n")
    (folder / "old.sif").write_bytes(b"old")
    plan = catalog.clean_plan(tiny, now=NOW)
    assert {p.name for p, _, _ in plan.rows} == {"tiny.build.log", "old.sif"}
    with building(folder, "tiny"):
        freed, skipped = catalog.remove(plan)
    assert [s.path.name for s in skipped] == ["tiny.build.log"] and (folder / "tiny.build.log").exists()
    assert not (folder / "old.sif").exists() and freed == {p.name: size for p, size, _ in plan.rows}["old.sif"]


def test_clean_of_a_project_never_built_finds_nothing(tiny):
    assert catalog.clean_plan(tiny).rows == [] and catalog.clean_plan(tiny).total == 0


def test_a_build_folder_made_on_another_host_is_left_alone(tiny):
    folder = tiny / build.IMAGES_DIR
    other = leftovers.make_build_dir(folder / f".build-tiny-{dead_pid()}")
    (other / leftovers.HOST_FILE).write_text(f"not-{socket.gethostname()}\n")
    assert catalog.clean_plan(tiny).rows == []


@pytest.mark.parametrize(("s", "text"), [(45, "45 s"), (5400, "90 min"), (90000, "25 h"), (864000, "10 d")])
def test_ages(s, text):
    assert catalog.human_age(s) == text
