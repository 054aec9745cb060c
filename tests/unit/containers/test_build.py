"""Image builds with a fake runtime (orchestrator/containers/build.py): no runtime, singularity
instead of apptainer, failures and time-outs leaving nothing behind, up to date or rebuilt, labels;
the digest file holds the content hash (one per content, whatever the SIF's bytes), an old-form
digest file or stamp. Real Apptainer builds: tests/integration/apptainer/test_apptainer_build.py
and test_image_identity.py."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path

import pytest
from fakes import FakeRunner, ok
from support import invoke

from orchestrator.containers import build, images
from orchestrator.util import files
from orchestrator.util.files import sha256_file
from orchestrator.util.runner import Completed


@pytest.fixture
def isolated_tmp(tmp_path, monkeypatch) -> Path:
    """tempfile's folder (build contexts) inside tmp_path, to see what a build leaves behind."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    return tmp


def fake_apptainer(
    rc: int = 0, write: bytes = b"SIF image bytes", output: str = "INFO:    Build complete\n", *, unique: bool = False
) -> FakeRunner:
    """A runner whose `apptainer build` writes ``write`` to its output path and exits ``rc``;
    ``unique``: a different SIF every build, as a real one (its build time and random id)."""
    builds = itertools.count(1)

    def fake_build(argv):
        if argv[1] == "--version":
            return Completed(tuple(argv), 0, "apptainer version 1.4.5\n", "")
        Path(argv[-2]).write_bytes(
            write + (f" build {next(builds)}".encode() if unique else b"")
        )  # a failed build may leave a half-written file
        return Completed(tuple(argv), rc, output, "FATAL:   While performing build: exit status 1\n" if rc else "")

    return FakeRunner(answers={"apptainer": fake_build, "git": ok("", rc=128)}, installed={"apptainer"})


def leftovers(out_dir: Path, tmp: Path) -> list[str]:
    """Files a build must not leave: temporary images, staging folders."""
    found = [p.name for p in out_dir.glob(".*.tmp")] if out_dir.exists() else []
    return found + [p.name for p in tmp.iterdir()]


def test_no_runtime_is_one_clear_error(tiny):
    with pytest.raises(images.ContainerError, match="neither apptainer nor singularity is on PATH"):
        build.build(tiny, "tiny", FakeRunner(installed=set()))


def test_no_runtime_on_the_command_line(tiny, monkeypatch):
    monkeypatch.setenv("PATH", str(tiny))  # nothing there
    result = invoke("container", "build", "tiny", "--project", str(tiny))
    assert result.exit_code != 0
    assert "neither apptainer nor singularity is on PATH" in result.output and "Traceback" not in result.output


def test_singularity_is_used_when_apptainer_is_missing(tiny, isolated_tmp):
    runner = fake_apptainer()
    runner.answers["singularity"] = runner.answers.pop("apptainer")
    runner.installed = {"singularity"}
    result = build.build(tiny, "tiny", runner)
    assert result.built and runner.called("singularity")[-1][1:3] == ["build", "--fakeroot"]


def test_missing_localimage_base_names_the_path(tiny, isolated_tmp):
    runner = fake_apptainer()
    with pytest.raises(images.ContainerError, match=r"the base image .*base\.sif does not exist") as err:
        build.build(tiny, "site", runner)
    assert "--set base=PATH" in err.value.render()
    assert not [c for c in runner.calls if c[:2] == ["apptainer", "build"]]
    assert not (tiny / ".orchestrator").exists() and leftovers(tiny, isolated_tmp) == []


def test_failing_build_leaves_no_image_and_no_temporaries(tiny, isolated_tmp):
    runner = fake_apptainer(rc=255, write=b"half an image")
    with pytest.raises(images.BuildError) as err:
        build.build(tiny, "tiny", runner)
    out_dir = tiny / build.IMAGES_DIR
    message = err.value.render()
    assert "building image 'tiny' failed" in message and "exited with 255" in message
    assert "FATAL:   While performing build" in message and str(out_dir / "tiny.build.log") in message
    assert err.value.exit_code == 1
    assert not (out_dir / "tiny.sif").exists() and not (out_dir / "tiny.sif.json").exists()
    assert leftovers(out_dir, isolated_tmp) == []
    assert "FATAL" in (out_dir / "tiny.build.log").read_text()
    assert not (tiny / "containers" / "tiny.digest").exists()


def test_timed_out_build_leaves_nothing(tiny, isolated_tmp):
    def slow(argv):
        if argv[1] == "--version":
            return Completed(tuple(argv), 0, "apptainer version 1.4.5\n", "")
        Path(argv[-2]).write_bytes(b"partial")
        raise subprocess.TimeoutExpired(argv, 5, output=b"INFO:    Starting build...\n")

    runner = FakeRunner(answers={"apptainer": slow, "git": ok("", rc=128)}, installed={"apptainer"})
    with pytest.raises(images.BuildError, match="timed out after 5 s"):
        build.build(tiny, "tiny", runner, timeout=5)
    assert leftovers(tiny / build.IMAGES_DIR, isolated_tmp) == [] and not (tiny / build.IMAGES_DIR / "tiny.sif").exists()


def test_build_then_up_to_date_then_rebuild_on_change(tiny, isolated_tmp):
    runner = fake_apptainer()
    first = build.build(tiny, "tiny", runner)
    image = tiny / build.IMAGES_DIR / "tiny.sif"
    assert first.built and image.read_bytes() == b"SIF image bytes"
    (argv,) = [c for c in runner.calls if c[1] == "build"]
    assert argv[:4] == ["apptainer", "build", "--fakeroot", "--force"] and Path(argv[4]).parent == image.parent
    assert Path(argv[4]).name.startswith(".tiny.sif.") and argv[5].endswith("tiny.def")  # built beside, renamed into place
    stamp = json.loads((tiny / build.IMAGES_DIR / "tiny.sif.json").read_text())
    assert stamp["content_hash"] == first.content_hash and stamp["digest"] == first.digest == "sha256:" + sha256_file(image)
    assert stamp["runtime"] == "apptainer version 1.4.5" and stamp["git_commit"] == "unknown"
    assert first.content_hash.startswith("content-sha256:")
    assert (tiny / "containers" / "tiny.digest").read_text() == first.content_hash + "\n"
    assert leftovers(image.parent, isolated_tmp) == []

    runner.calls.clear()
    again = build.build(tiny, "tiny", runner)
    assert not again.built and again.digest == first.digest
    assert not [c for c in runner.calls if c[:2] == ["apptainer", "build"]]

    (tiny / "containers" / "tiny.digest").unlink()  # e.g. a fresh clone: rewritten, nothing built
    build.build(tiny, "tiny", runner)
    assert (tiny / "containers" / "tiny.digest").read_text() == first.content_hash + "\n"

    killed = image.parent / ".tiny.sif.abcd1234.tmp"  # what a build killed by SIGKILL leaves
    killed.write_bytes(b"half")
    (tiny / "pkg" / "mod.py").write_text("x = 3\n")
    lines: list[str] = []
    third = build.build(tiny, "tiny", runner, say=lines.append)
    assert third.built and third.content_hash != first.content_hash and "changed: pkg/mod.py" in lines[0]
    assert not killed.exists()  # the next build removes it, under the image's lock
    assert build.build(tiny, "tiny", runner, force=True).built


def test_rendered_definition_carries_hash_and_commit_labels(tiny, isolated_tmp):
    seen = {}

    def fake_build(argv):
        if argv[1] == "--version":
            return Completed(tuple(argv), 0, "apptainer version 1.4.5\n", "")
        seen["def"] = Path(argv[-1]).read_text()
        seen["staged"] = sorted(str(p.relative_to(Path(argv[-1]).parent)) for p in Path(argv[-1]).parent.rglob("*") if p.is_file())
        Path(argv[-2]).write_bytes(b"img")
        return Completed(tuple(argv), 0, "", "")

    head = "a" * 40

    def git(argv):
        return Completed(tuple(argv), 0, head + "\n" if "rev-parse" in argv else " M pkg/mod.py\n", "")

    runner = FakeRunner(answers={"apptainer": fake_build, "git": git}, installed={"apptainer", "git"})
    result = build.build(tiny, "tiny", runner)
    assert f"org.orchestrator.content-hash {result.content_hash}\n" in seen["def"]
    assert f"org.orchestrator.git-commit {head}-dirty\n" in seen["def"]
    assert seen["staged"] == ["src/README.md", "src/pkg/mod.py", "src/pyproject.toml", "tiny.def"]


# --- the digest file: one per content ----------------------------------------------------------


def test_the_same_inputs_give_one_digest_file_however_often_built(tiny, isolated_tmp):
    runner = fake_apptainer(unique=True)
    digest_file = tiny / "containers" / "tiny.digest"
    first = build.build(tiny, "tiny", runner)
    written = digest_file.stat().st_mtime_ns
    again = build.build(tiny, "tiny", runner, force=True)
    assert again.built and again.digest != first.digest  # another SIF...
    assert again.content_hash == first.content_hash and digest_file.read_text() == first.content_hash + "\n"  # ...the same digest
    assert digest_file.stat().st_mtime_ns == written  # not even rewritten: DVC sees nothing

    (tiny / "pkg" / "mod.py").write_text("x = 2\n")
    changed = build.build(tiny, "tiny", runner)
    assert changed.built and digest_file.read_text() == changed.content_hash + "\n" != first.content_hash + "\n"
    (tiny / "pkg" / "mod.py").write_text("x = 1\n")  # the revert
    reverted = build.build(tiny, "tiny", runner)
    assert reverted.built and digest_file.read_text() == first.content_hash + "\n"


def test_the_build_leaves_the_sifs_sha256_for_push_and_provenance(tiny, isolated_tmp, monkeypatch):
    result = build.build(tiny, "tiny", fake_apptainer())
    monkeypatch.setattr(files, "sha256_file", lambda p: pytest.fail(f"{p} hashed again although the build hashed it"))
    files._SHA256_MEMO.clear()  # as a new process: only the file beside the image
    assert "sha256:" + files.cached_sha256(result.image) == result.digest
    assert json.loads(build.stamp_path(result.image).read_text())["digest"] == result.digest


def test_an_old_form_digest_file_is_rewritten_with_one_line_saying_so(tiny, isolated_tmp):
    digest_file = tiny / "containers" / "tiny.digest"
    digest_file.parent.mkdir(exist_ok=True)
    digest_file.write_text("sha256:" + "ab" * 32 + "\n")  # what an older orchestrator wrote: the SIF's sha256
    lines: list[str] = []
    result = build.build(tiny, "tiny", fake_apptainer(), say=lines.append)
    assert digest_file.read_text() == result.content_hash + "\n"
    told = [line for line in lines if "tiny.digest now holds" in line]
    assert told and told[0].endswith(
        "tiny.digest now holds the image's content hash instead of the SIF's sha256: stages that depend on it run once more"
    ), lines
    lines.clear()
    build.build(tiny, "tiny", fake_apptainer(), force=True, say=lines.append)
    assert not [line for line in lines if "now holds" in line]  # said once, when the form changed


def test_an_image_stamped_by_an_older_orchestrator_is_rebuilt_once(tiny, isolated_tmp):
    runner = fake_apptainer()
    first = build.build(tiny, "tiny", runner)
    path = build.stamp_path(first.image)
    stamp = json.loads(path.read_text())
    path.write_text(json.dumps({**stamp, "version": 1, "content_hash": "sha256:" + "0" * 64}))
    lines: list[str] = []
    again = build.build(tiny, "tiny", runner, say=lines.append)
    assert again.built and "built by an older orchestrator" in lines[0]
    assert not build.build(tiny, "tiny", runner).built


def test_a_code_change_rebuilds_nothing_when_the_image_holds_no_code(tiny, isolated_tmp):
    images_yaml = tiny / "containers" / "images.yaml"
    images_yaml.write_text(images_yaml.read_text().replace("source: [pkg, pyproject.toml]", "source: []", 1))
    template = tiny / "containers" / "tiny.def.j2"
    template.write_text(
        "Bootstrap: scratch\n%labels\n    org.orchestrator.content-hash {{ content_hash | label }}\n"
        '%help\n    deps: {{ requirements | map("q") | join(" ") }}\n'
    )
    runner = fake_apptainer()
    first = build.build(tiny, "tiny", runner)
    (tiny / "pkg" / "mod.py").write_text("x = 2\n")
    assert not build.build(tiny, "tiny", runner).built
    pyproject = tiny / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"dvclive>=3.48"', '"dvclive>=3.49"'))
    lines: list[str] = []
    changed = build.build(tiny, "tiny", runner, say=lines.append)
    assert changed.built and changed.content_hash != first.content_hash and "changed: the definition" in lines[0]
