"""What builds leave (orchestrator/containers/leftovers.py), and a stopped build leaving nothing:
find only what a gone process left (live builds, another host's, a runtime still running are
kept), remove it all (read-only folders too) and count what it frees; a build stopped by a
signal, through a FakeRunner and through the command line with a stand-in runtime on PATH
(real Apptainer: tests/integration/apptainer/test_build_signals.py)."""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import NO_SUCH_PID, FakeRunner, ok
from support import ROOT

from orchestrator.containers import build, leftovers
from orchestrator.util.runner import Completed, Stopped


@pytest.fixture
def images(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "systmp"))  # the fallback folder, inside the test's
    (tmp_path / "systmp").mkdir()
    folder = tmp_path / "images"
    folder.mkdir()
    return folder


def dead_pid() -> int:
    """The pid of a process that has ended (reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def build_folder(parent: Path, name: str, pid: int, size: int = 4096, host: str | None = None) -> Path:
    folder = leftovers.make_build_dir(leftovers.build_dir(parent, name, pid))
    if host is not None:
        (folder / leftovers.HOST_FILE).write_text(host + "\n")
    (folder / "tmp" / "build-temp-1" / "rootfs").mkdir(parents=True)
    (folder / "tmp" / "build-temp-1" / "rootfs" / "big").write_bytes(os.urandom(size))
    return folder


def test_find_lists_what_gone_builds_left_and_nothing_else(images):
    gone = dead_pid()
    left = build_folder(images, "ci", gone)
    image = images / f".ci.sif.{gone}.tmp"
    image.write_bytes(b"x" * 10000)
    mine = build_folder(images, "ci", os.getpid())  # a live build (this process)
    with subprocess.Popen(["sleep", "30"]) as live:
        build_folder(images, "tiny", live.pid)
        (images / f".tiny.sif.{live.pid}.tmp").write_bytes(b"being written")
        build_folder(images, "far", dead_pid(), host=socket.gethostname() + "-elsewhere")  # its process cannot be checked
        for unrelated in ("ci.sif", ".ci.sif.lock", "ci.build.log", ".build-notapid-x", ".ci.sif.abc.tmp"):
            (images / unrelated).write_text("keep")
        found = leftovers.find(images)
        live.kill()
    assert sorted(item.path for item in found) == sorted([left, image])
    assert all(f"process {gone} is gone" in item.what for item in found)
    assert {item.path: item.what.split(" of ")[0] for item in found} == {left: "build folder", image: "unfinished image"}
    assert next(i for i in found if i.path == left).bytes >= 4096 and mine.is_dir()


def test_a_runtime_still_running_keeps_its_folder_and_image(images):
    """A build killed outright leaves its runtime running (it has a process group of its own):
    what it writes into stays until it has ended."""
    gone = dead_pid()
    folder = build_folder(images, "ci", gone)
    image = images / f".ci.sif.{gone}.tmp"
    image.write_bytes(b"being written")
    with subprocess.Popen(["sleep", "30"]) as runtime:
        (folder / leftovers.RUNTIME_FILE).write_text(f"{runtime.pid}\n")
        assert leftovers.find(images) == []
        runtime.kill()
    (folder / leftovers.RUNTIME_FILE).write_text(f"{NO_SUCH_PID}\n")
    assert sorted(i.path for i in leftovers.find(images)) == sorted([folder, image])


def test_a_killed_runtime_nobody_reaped_is_gone(images):
    """A zombie (killed, its parent gone and nobody reaping it, as under some containers' init) does not keep a folder."""
    folder = build_folder(images, "ci", dead_pid())
    zombie = subprocess.Popen(["sleep", "30"])
    zombie.kill()
    time.sleep(0.2)  # dead, not yet reaped
    (folder / leftovers.RUNTIME_FILE).write_text(f"{zombie.pid}\n")
    assert [i.path for i in leftovers.find(images)] == [folder]
    zombie.wait()


def test_find_searches_the_fallback_folder_too(images):
    fallback = leftovers.fallback_dir()
    assert fallback.parent == images.parent / "systmp" and str(os.getuid()) in fallback.name
    left = build_folder(fallback, "ci", dead_pid())
    assert [i.path for i in leftovers.find(images)] == [left]
    assert [i.path for i in leftovers.find(images / "no such folder")] == [left]  # a missing folder is no error


def test_remove_frees_read_only_trees_and_counts_what_it_freed(images):
    left = build_folder(images, "ci", dead_pid(), size=100_000)
    rootfs = left / "tmp" / "build-temp-1" / "rootfs"
    shared = images / "pip-cache-wheel"
    shared.write_bytes(os.urandom(50_000))
    os.link(shared, rootfs / "wheel")  # staged by a hard link: removing it frees nothing
    (rootfs / "usr").mkdir()
    (rootfs / "usr" / "f").write_text("x")
    for folder in (rootfs / "usr", rootfs):  # as a --fakeroot root file system has them
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    found = leftovers.find(images)
    (item,) = found
    assert 100_000 <= item.bytes < 150_000  # the linked wheel is not counted
    assert leftovers.remove(found) == item.bytes
    assert not left.exists() and shared.is_file()


def test_remove_counts_only_what_went(images, monkeypatch):
    left = build_folder(images, "ci", dead_pid(), size=100_000)
    (item,) = leftovers.find(images)
    monkeypatch.setattr("shutil.rmtree", lambda path, ignore_errors=False: None)  # e.g. another user's files
    assert leftovers.remove([item]) == 0 and left.exists()


# --- a build stopped through the library (FakeRunner) ------------------------------------------

POST = "INFO:    Starting build...\nINFO:    Running post scriptlet\n+ sleep 60\n"


def apptainer(stop_at: str | None = None, signum: int = signal.SIGTERM) -> FakeRunner:
    """A fake runtime that writes its image and streams POST; raises Stopped(signum) (or, for
    SIGINT, KeyboardInterrupt as Python's own handler does) after the line ``stop_at``."""

    def fake_build(argv):
        if argv[1] == "--version":
            return Completed(tuple(argv), 0, "apptainer version 1.4.5\n", "")
        Path(argv[-2]).write_bytes(b"new image")
        return Completed(tuple(argv), 0, POST, "")

    runner = FakeRunner(answers={"apptainer": fake_build, "git": ok("", rc=128)}, installed={"apptainer"})

    def after(line):
        if line == stop_at:
            (Path(runner.stream_envs[-1]["APPTAINER_TMPDIR"]) / "build-temp-1").mkdir()  # what the runtime makes
            raise KeyboardInterrupt if signum == signal.SIGINT else Stopped(signum)

    runner.after_line = after
    return runner


def left_behind(images: Path) -> list[str]:
    return sorted(p.name for p in images.iterdir() if p.name.startswith(".build-") or p.name.endswith(".tmp"))


def test_a_stopped_build_leaves_nothing_and_keeps_the_old_image(tiny):
    build.build(tiny, "tiny", apptainer())
    out = tiny / build.IMAGES_DIR / "tiny.sif"
    before = (out.read_bytes(), out.stat().st_mtime_ns)
    said: list[str] = []
    with pytest.raises(Stopped) as stop:
        build.build(tiny, "tiny", apptainer(stop_at="+ sleep 60"), force=True, say=said.append)
    line = "build of tiny stopped by SIGTERM: nothing was installed, the old image is kept"
    assert said[-1] == line and stop.value.reported and stop.value.exit_code == 143
    assert (out.read_bytes(), out.stat().st_mtime_ns) == before
    assert left_behind(out.parent) == []
    assert (out.parent / "tiny.build.log").read_text().splitlines()[-2:] == ["+ sleep 60", line]


def test_a_first_build_stopped_by_ctrl_c_says_there_was_no_image(tiny):
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        build.build(tiny, "tiny", apptainer(stop_at="+ sleep 60", signum=signal.SIGINT), say=said.append)
    out = tiny / build.IMAGES_DIR / "tiny.sif"
    assert said[-1] == f"build of tiny stopped by SIGINT: nothing was installed, there was no image at {out.absolute()} before"
    assert not out.exists() and left_behind(out.parent) == []


def test_the_next_build_removes_what_a_killed_one_left_and_says_how_much(tiny):
    images = (tiny / build.IMAGES_DIR).absolute()
    images.mkdir(parents=True)
    gone = dead_pid()
    build_folder(images, "tiny", gone, size=300_000)
    (images / f".tiny.sif.{gone}.tmp").write_bytes(os.urandom(200_000))
    said: list[str] = []
    build.build(tiny, "tiny", apptainer(), say=said.append)
    (line,) = [s for s in said if "removed what stopped builds left" in s]
    freed = re.search(r", (\d+) KiB freed: ", line)
    assert line.startswith(f"tiny: removed what stopped builds left in {images}, ") and freed, line
    assert 488 <= int(freed[1]) < 560  # 300 + 200 kB, and the folders
    assert line.endswith(f"freed: .build-tiny-{gone}, .tiny.sif.{gone}.tmp")
    assert left_behind(images) == []


def test_an_image_folder_apptainer_cannot_take_gets_the_fallback_folder(tiny, images):
    out = tiny / "my images" / "tiny.sif"  # a space: no %files path can name a folder in it
    said: list[str] = []
    runner = apptainer()
    build.build(tiny, "tiny", runner, output=out, say=said.append)
    tmp = Path(runner.stream_envs[-1]["APPTAINER_TMPDIR"])
    assert tmp.parent.parent == leftovers.fallback_dir() and tmp.parent.name == f".build-tiny-{os.getpid()}"
    assert f"tiny: {out.parent} has characters Apptainer's %files cannot take: the build's temporary files go to {tmp.parent}" in said
    assert out.read_bytes() == b"new image" and list(leftovers.fallback_dir().iterdir()) == []


def test_a_runtime_still_writing_its_image_keeps_it_from_the_next_build(tiny):
    images = (tiny / build.IMAGES_DIR).absolute()
    images.mkdir(parents=True)
    gone = dead_pid()
    folder = build_folder(images, "tiny", gone)
    image = images / f".tiny.sif.{gone}.tmp"
    image.write_bytes(b"being written")
    with subprocess.Popen(["sleep", "30"]) as runtime:
        (folder / leftovers.RUNTIME_FILE).write_text(f"{runtime.pid}\n")
        said: list[str] = []
        build.build(tiny, "tiny", apptainer(), say=said.append)
        runtime.kill()
    assert folder.is_dir() and image.is_file() and not [s for s in said if "removed" in s]


# --- the command line, with a stand-in runtime on PATH -----------------------------------------

FAKE_RUNTIME = """\
#!/bin/bash
# A stand-in for apptainer: `--version`, and `build ... OUT DEF`, which makes a folder in
# APPTAINER_TMPDIR, writes a partial image, starts a child that sleeps, and waits for it.
if [ "$1" = --version ]; then echo "apptainer version 1.4.5"; exit 0; fi
out="${@: -2:1}"
echo "INFO:    Starting build..."
mkdir -p "$APPTAINER_TMPDIR/build-temp-42/rootfs" && head -c 100000 /dev/urandom > "$APPTAINER_TMPDIR/build-temp-42/rootfs/blob"
echo partial > "$out"
echo "INFO:    Running post scriptlet"
sleep 60 &
echo $! > "$FAKE_RUNTIME_PIDS"
echo "+ sleep 60"
wait
"""


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_the_command_line_stops_on_a_signal_and_leaves_nothing(tiny, tmp_path, signum, status):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apptainer").write_text(FAKE_RUNTIME)
    (bin_dir / "apptainer").chmod(0o755)
    pids = tmp_path / "runtime.pids"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_RUNTIME_PIDS": str(pids), "PYTHONPATH": str(ROOT)}
    images = tiny / build.IMAGES_DIR
    log = images / "tiny.build.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "container", "build", "tiny"],
        cwd=tiny,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not (log.is_file() and "+ sleep 60" in log.read_text()) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert "+ sleep 60" in log.read_text(), proc.communicate()
    assert list(images.glob(".build-tiny-*/tmp/build-temp-42"))  # the runtime's folder is beside the image
    sleeper = int(pids.read_text())
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    name = signal.Signals(signum).name
    line = f"build of tiny stopped by {name}: nothing was installed, there was no image at {(images / 'tiny.sif').absolute()} before"
    assert proc.returncode == status and err.decode().splitlines()[-1] == line, err.decode()
    assert left_behind(images) == [] and not (images / "tiny.sif").exists()
    assert log.read_text().splitlines()[-1] == line
    assert not running(sleeper)  # the runtime's child was stopped with it


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
