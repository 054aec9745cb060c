"""Image builds with a fake runtime (orchestrator/containers/build.py): no runtime, singularity
instead of apptainer, failures and time-outs leaving nothing behind, up to date or rebuilt, labels.
Real Apptainer builds: tests/integration/apptainer/test_apptainer_build.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fakes import FakeRunner, ok
from support import invoke

from orchestrator.containers import build, images
from orchestrator.util.files import sha256_file
from orchestrator.util.runner import Completed


@pytest.fixture
def isolated_tmp(tmp_path, monkeypatch) -> Path:
    """tempfile's folder (build contexts) inside tmp_path, to see what a build leaves behind."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    return tmp


def fake_apptainer(rc: int = 0, write: bytes = b"SIF image bytes", output: str = "INFO:    Build complete\n") -> FakeRunner:
    """A runner whose `apptainer build` writes ``write`` to its output path and exits ``rc``."""

    def fake_build(argv):
        if argv[1] == "--version":
            return Completed(tuple(argv), 0, "apptainer version 1.4.5\n", "")
        Path(argv[-2]).write_bytes(write)  # a failed build may leave a half-written file
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
    assert (tiny / "containers" / "tiny.digest").read_text() == first.digest + "\n"
    assert leftovers(image.parent, isolated_tmp) == []

    runner.calls.clear()
    again = build.build(tiny, "tiny", runner)
    assert not again.built and again.digest == first.digest
    assert not [c for c in runner.calls if c[:2] == ["apptainer", "build"]]

    (tiny / "containers" / "tiny.digest").unlink()  # e.g. a fresh clone: rewritten, nothing built
    build.build(tiny, "tiny", runner)
    assert (tiny / "containers" / "tiny.digest").read_text() == first.digest + "\n"

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
