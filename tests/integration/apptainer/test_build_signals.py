"""Real Apptainer builds (marker ``apptainer``) stopped by a signal, or killed outright.

The image is a scratch one holding just a shell, ``sleep`` and the C library (copied from
this machine), so that its ``%post`` can sleep: the build is caught in the middle, with the
runtime's own folder (``build-temp-*``, an unpacked root file system) on disk, in a second.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import ROOT, container_cli, make_tiny

from orchestrator.containers import build, leftovers

SLEEP = 117  # seconds; a number no other test sleeps, to find a %post left running


def sleepy_project(where: Path, seconds: int) -> Path:
    """make_tiny's project plus image ``sleepy``, whose %post sleeps ``seconds``."""
    project = make_tiny(where)
    libs = sorted(
        set(re.findall(r"(/\S+\.so[.\d]*)", subprocess.run(["ldd", "/bin/sleep", "/bin/sh"], capture_output=True, text=True).stdout))
    )
    files = "".join(f"    {lib} {lib}\n" for lib in libs)
    (project / "containers" / "sleepy.def.j2").write_text(
        f"Bootstrap: scratch\n\n%files\n    /bin/sh /bin/sh\n    /bin/sleep /bin/sleep\n{files}\n"
        "%labels\n    org.orchestrator.content-hash {{ content_hash | label }}\n\n"
        f"%post\n    echo started\n    sleep {seconds}\n"
    )
    with (project / "containers" / "images.yaml").open("a") as f:
        f.write("sleepy:\n  definition: sleepy.def.j2\n")
    return project


def start_build(project: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "orchestrator", "container", "build", "sleepy"]
    return subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_until_sleeping(proc: subprocess.Popen, images: Path) -> Path:
    """The runtime's own build folder, once %post sleeps (the log says so)."""
    log = images / "sleepy.build.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        runtime_dirs = list(images.glob(".build-sleepy-*/tmp/build-temp-*"))
        if runtime_dirs and log.is_file() and f"+ sleep {SLEEP}" in log.read_text():
            return runtime_dirs[0]
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"the build never reached its %post sleep: {proc.communicate()}")


def tmp_build_folders() -> set[str]:
    return {p.name for p in Path("/tmp").glob("build-temp-*")}


def sleeping_posts() -> list[int]:
    """Processes running `sleep SLEEP` (a %post of these tests left running)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().split(b"\0")[:2] == [b"sleep", str(SLEEP).encode()]:
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def fingerprint(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def left_behind(images: Path) -> list[str]:
    return sorted(p.name for p in images.iterdir() if p.name.startswith(".build-") or p.name.endswith(".tmp"))


@pytest.mark.apptainer
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_stops_a_real_build_and_leaves_nothing(apptainer, tmp_path, signum, status):
    project = sleepy_project(tmp_path / "proj", seconds=0)
    old, _ = container_cli("build", "sleepy", cwd=project, timeout=300)
    assert old.returncode == 0 and "sleepy: built" in old.stdout, old.stderr
    images = project / build.IMAGES_DIR
    image = images / "sleepy.sif"
    before = fingerprint(image)
    template = project / "containers" / "sleepy.def.j2"
    template.write_text(template.read_text().replace("sleep 0", f"sleep {SLEEP}"))
    in_tmp = tmp_build_folders()

    proc = start_build(project)
    runtime_dir = wait_until_sleeping(proc, images)
    assert runtime_dir.parent.parent.parent == images  # the runtime's folder is beside the image, not in /tmp
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)

    line = f"build of sleepy stopped by {signal.Signals(signum).name}: nothing was installed, the old image is kept"
    assert proc.returncode == status, err
    assert err.splitlines()[-1] == line and "sleepy: built" not in out
    assert (images / "sleepy.build.log").read_text().splitlines()[-1] == line
    assert left_behind(images) == []
    assert tmp_build_folders() - in_tmp == set()
    assert fingerprint(image) == before
    time.sleep(0.5)
    assert sleeping_posts() == []


@pytest.mark.apptainer
def test_the_next_build_removes_what_a_killed_build_left(apptainer, tmp_path):
    project = sleepy_project(tmp_path / "proj", seconds=SLEEP)
    images = project / build.IMAGES_DIR
    proc = start_build(project)
    runtime_dir = wait_until_sleeping(proc, images)
    folder = runtime_dir.parent.parent
    runtime = int((folder / leftovers.RUNTIME_FILE).read_text())
    # Killed outright, as by a power loss, the OOM killer or a job's cgroup: the build and its runtime.
    proc.kill()
    proc.communicate()
    os.killpg(runtime, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while sleeping_posts() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert folder.is_dir() and runtime_dir.is_dir()  # what the next build must remove

    template = project / "containers" / "sleepy.def.j2"
    template.write_text(template.read_text().replace(f"sleep {SLEEP}", "sleep 0"))
    again, _ = container_cli("build", "sleepy", cwd=project, timeout=300)
    assert again.returncode == 0 and "sleepy: built" in again.stdout, again.stderr
    where = re.escape(str(images.absolute()))
    freed = re.search(rf"sleepy: removed what stopped builds left in {where}, ([\d.]+ \w+) freed: (.+)", again.stderr)
    assert freed, again.stderr
    assert freed[2] == folder.name and freed[1] != "0 B"
    assert left_behind(images) == []
