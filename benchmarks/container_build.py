"""Issue 24's image figures: builds of the CI image as a user meets them, and its push.

In a temporary copy of the project (the files git tracks or would track, no .git), each
step through the command line as a user runs it (`python -m orchestrator container build
ci`, Python's start-up included), with the digest file (containers/ci.digest) after it:

* cold: no image yet (a fresh clone); bound: no slower than before the project's code
  left the image (279-299 s measured on this 2-core machine; COLD_BOUND_S allows 10 %);
* no-op: nothing changed; bound: < 2 s;
* one-line change to experiments/: the image holds no code, so nothing is built and the
  digest stays; bound: <= 30 s;
* revert of that change: the same;
* dependency change (``numpy>=1.26`` -> ``numpy>=1.26.0`` in pyproject.toml's train
  extra): the full rebuild, a new digest;
* dependency revert: the full rebuild again, and the cold build's digest back (one
  identity per content, although the SIF's bytes differ);
* push: the image to a path on an sshd of the benchmark's own on 127.0.0.1 (rsync over
  ssh, the push code of `container build --push`), then the same again (nothing sent);
  without root or sshd, a path on this machine through the same code;
* resumed push: a push of the other image interrupted by SIGINT to its process group
  (Ctrl-C) when about half has arrived, then pushed again: it resumes from what arrived;
* with ``--baseline``: a cold build of the same image with the project's code copied in
  and pip-installed (images.yaml's ``source``, as every image was built before), in the
  same run, for a comparison under the same load (this machine is shared: the load
  average is recorded too).

Needs Apptainer (as root: bash containers/install-apptainer.sh) and the network the cold
build needs (Debian's mirror, PyPI). Takes three full builds (15 min here).

Usage: python benchmarks/container_build.py [--keep DIR] [--skip-dependency-revert]
Writes benchmarks/out/container_build.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
COLD_BOUND_S = 299 * 1.1  # the slowest cold build measured before the split, plus this machine's run-to-run spread
NOOP_BOUND_S = 2.0
ONE_LINE_BOUND_S = 30.0
CODE_FILE = "experiments/classify/__main__.py"
DEPENDENCY = ('"numpy>=1.26"', '"numpy>=1.26.0"')  # a real change of the dependency list; pip installs the same


# --- the project copy and its builds -------------------------------------------------------------


def copy_project(dest: Path) -> Path:
    """The files git tracks or would track (not ignored), as a fresh clone has them."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True, check=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / "containers" / "ci.digest").unlink(missing_ok=True)  # no image built yet
    return dest


def build(project: Path, step: str, *extra: str, image: str = "ci") -> dict:
    """`container build ci` in ``project``: wall time, built or not, the digest file and the SIF's sha256."""
    argv = [sys.executable, "-m", "orchestrator", "container", "build", "ci", *extra]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=project, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{step}: `{' '.join(argv[1:])}` failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr[-4000:]}")
    sif = project / ".orchestrator" / "images" / f"{image}.sif"
    stamp = json.loads((project / ".orchestrator" / "images" / f"{image}.sif.json").read_text())
    row = {
        "step": step,
        "seconds": round(seconds, 2),
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],  # before, after
        "built": "ci: built" in proc.stdout,
        "digest_file": (project / "containers" / f"{image}.digest").read_text().strip(),
        "sif_sha256": stamp["digest"],
        "image_bytes": sif.stat().st_size,
        "said": [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("ci:")][-3:],
    }
    print(f"{step:<28} {seconds:>8.1f} s  {'built' if row['built'] else 'up to date':<10}  {row['digest_file'][:27]}…")
    return row


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if old not in text:
        raise SystemExit(f"{path}: {old!r} not found; update the benchmark")
    path.write_text(text.replace(old, new, 1))


# --- push: an sshd of our own on loopback --------------------------------------------------------


@contextlib.contextmanager
def loopback_sshd(where: Path) -> Iterator[tuple[str, list[str]] | None]:
    """(``user@127.0.0.1``, ssh options) of an sshd on a free port, for the block; None
    without root or sshd (it must switch to the user)."""
    sshd = shutil.which("sshd") or next((p for p in ("/usr/sbin/sshd", "/sbin/sshd") if os.access(p, os.X_OK)), None)
    if os.geteuid() != 0 or not sshd or not shutil.which("rsync"):
        yield None
        return
    import pwd

    user = pwd.getpwuid(os.geteuid()).pw_name
    host_key, key = where / "host_key", where / "client_key"
    for path in (host_key, key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    (where / "authorized_keys").write_text((where / "client_key.pub").read_text())
    (where / "authorized_keys").chmod(0o600)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = where / "sshd_config"
    config.write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {host_key}\nPidFile {where / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {where / 'authorized_keys'}\nAuthenticationMethods publickey\nPasswordAuthentication no\n"
        f"KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\nAllowUsers {user}\n"
    )
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    options = ["-F", "/dev/null", "-p", str(port), "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no"]
    options += ["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes"]
    host = f"{user}@127.0.0.1"
    try:
        deadline = time.monotonic() + 15
        while subprocess.run(["ssh", *options, "--", host, "true"], capture_output=True, check=False).returncode != 0:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the benchmark's sshd on 127.0.0.1 did not come up")
            time.sleep(0.1)
        yield host, options
    finally:
        proc.terminate()
        proc.wait(timeout=10)


PUSH_CHILD = """\
import json, sys
from orchestrator.containers import push
from orchestrator.util.runner import SubprocessRunner
image, target, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
try:
    r = push.push(image, target, SubprocessRunner(), ssh_options=options)
except KeyboardInterrupt:
    sys.exit("push interrupted (Ctrl-C)")
except push.ShipError as exc:
    sys.exit(exc.render())
print(json.dumps({"transferred": r.transferred, "bytes": r.bytes_transferred, "method": r.method, "resumed_from": r.resumed_from}))
"""


def push(project: Path, image: Path, target: str, options: list[str], step: str, interrupt_at: float | None = None) -> dict:
    """One push through the push code, in its own process group (as `container build --push`
    at a terminal); ``interrupt_at``: SIGINT to the group once that share of the image has
    arrived at the temporary name (Ctrl-C)."""
    part = Path(target.split(":", 1)[-1])
    part = part.with_name(f".{part.name}.part")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", PUSH_CHILD, str(image), target, json.dumps(options)],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    interrupted_at = None
    if interrupt_at is not None:
        size = image.stat().st_size
        while proc.poll() is None:
            arrived = part.stat().st_size if part.exists() else 0
            if arrived >= interrupt_at * size:
                os.killpg(proc.pid, signal.SIGINT)
                interrupted_at = arrived
                break
            time.sleep(0.005)
    out, err = proc.communicate(timeout=1800)
    seconds = time.perf_counter() - t0
    row: dict = {"step": step, "seconds": round(seconds, 2), "exit": proc.returncode}
    if interrupt_at is not None:
        row["interrupted_at_bytes"] = interrupted_at
        row["part_bytes_left"] = part.stat().st_size if part.exists() else 0
        row["message"] = err.strip().splitlines()[:3]
        print(f"{step:<28} {seconds:>8.1f} s  stopped with {row['part_bytes_left'] / 2**20:.0f} MiB arrived (exit {proc.returncode})")
        return row
    if proc.returncode != 0:
        raise SystemExit(f"{step}: the push failed (exit {proc.returncode}):\n{out}{err[-3000:]}")
    row.update(json.loads(out.strip().splitlines()[-1]))
    sent = f"{row['bytes'] / 2**20:.0f} MiB sent ({row['method']}, resumed from {row['resumed_from']:,} bytes)"
    print(f"{step:<28} {seconds:>8.1f} s  {sent}")
    return row


# --- the run -------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one, removed)")
    ap.add_argument("--skip-dependency-revert", action="store_true", help="leave out the third full build (and the resumed push)")
    ap.add_argument("--baseline", action="store_true", help="also a cold build with the project's code in the image, as before")
    a = ap.parse_args()
    if not (shutil.which("apptainer") or shutil.which("singularity")):
        print("no apptainer or singularity on PATH (as root: bash containers/install-apptainer.sh)", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        work = a.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="container-build-", dir="/var/tmp")))
        work.mkdir(parents=True, exist_ok=True)
        project = copy_project(work / "project")
        print(f"project copy: {project}\n{'step':<28} {'wall':>10}  {'result':<10}  digest file")
        rows = [build(project, "cold")]
        rows.append(build(project, "no-op"))
        code = project / CODE_FILE
        original = code.read_text()
        code.write_text(original + "# a one-line change\n")
        rows.append(build(project, "one-line change to code"))
        code.write_text(original)
        rows.append(build(project, "revert of the code change"))
        edit(project / "pyproject.toml", *DEPENDENCY)
        rows.append(build(project, "dependency change"))
        image = project / ".orchestrator" / "images" / "ci.sif"
        pushes = []
        (work / "sshd").mkdir(exist_ok=True)
        sshd = stack.enter_context(loopback_sshd(work / "sshd"))
        remote = work / "cluster" / "containers" / "orchestrator.sif"
        target, options = (f"{sshd[0]}:{remote}", sshd[1]) if sshd else (str(remote), [])
        pushes.append(push(project, image, target, options, "push"))
        pushes.append(push(project, image, target, options, "push again (nothing new)"))
        if not a.skip_dependency_revert:
            edit(project / "pyproject.toml", *reversed(DEPENDENCY))
            rows.append(build(project, "dependency revert"))
            pushes.append(push(project, image, target, options, "push, Ctrl-C halfway", interrupt_at=0.5))
            pushes.append(push(project, image, target, options, "resumed push"))
        if a.baseline:
            images = project / ".orchestrator" / "images"
            with_code = ["--set", "source=pyproject.toml orchestrator experiments templates"]
            out = ["--output", str(images / "with-code.sif"), "--digest-file", "containers/with-code.digest"]
            rows.append(build(project, "baseline: code in the image", *with_code, *out, image="with-code"))
        result = summarise(rows, pushes, "ssh to 127.0.0.1 (rsync)" if sshd else "a path on this machine (copy)")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "container_build.json").write_text(json.dumps(result, indent=2) + "\n")
    print("\nPASS" if result["ok"] else "\nFAIL:\n  " + "\n  ".join(result["failures"]))
    return 0 if result["ok"] else 1


def summarise(rows: list[dict], pushes: list[dict], push_to: str) -> dict:
    by = {r["step"]: r for r in rows}
    cold, code = by["cold"], by["one-line change to code"]
    failures = []
    if cold["seconds"] > COLD_BOUND_S:
        failures.append(f"cold build {cold['seconds']:.0f} s > {COLD_BOUND_S:.0f} s")
    if by["no-op"]["built"] or by["no-op"]["seconds"] > NOOP_BOUND_S:
        failures.append(f"no-op: built={by['no-op']['built']}, {by['no-op']['seconds']:.1f} s (bound {NOOP_BOUND_S} s)")
    if code["seconds"] > ONE_LINE_BOUND_S or code["built"] or code["digest_file"] != cold["digest_file"]:
        failures.append(f"one-line code change: {code['seconds']:.1f} s, built={code['built']} (bound {ONE_LINE_BOUND_S} s, no rebuild)")
    if by["revert of the code change"]["digest_file"] != cold["digest_file"]:
        failures.append("the code revert changed the digest file")
    dep = by["dependency change"]
    if not dep["built"] or dep["digest_file"] == cold["digest_file"]:
        failures.append("the dependency change did not rebuild the image with a new digest")
    if "dependency revert" in by:
        back = by["dependency revert"]
        if not back["built"] or back["digest_file"] != cold["digest_file"]:
            failures.append("the dependency revert did not give the cold build's digest back")
        if back["sif_sha256"] == cold["sif_sha256"]:
            failures.append("two builds gave byte-identical SIFs: the test of one digest per content proves nothing here")
    baseline = by.get("baseline: code in the image")
    full = [r["seconds"] for r in rows if r["built"] and r is not baseline]
    resumed = [p for p in pushes if p["step"] == "resumed push"]
    if resumed and not resumed[0].get("resumed_from"):
        failures.append("the push after Ctrl-C did not resume from what had arrived")
    return {
        "builds": rows,
        "pushes": pushes,
        "push_to": push_to,
        "bounds": {"cold_s": COLD_BOUND_S, "noop_s": NOOP_BOUND_S, "one_line_s": ONE_LINE_BOUND_S},
        # The network (Debian's mirror, PyPI) and this shared machine's load vary from build to build:
        # the cold build against the baseline, and the median full build of the thin image against it.
        "cold_over_baseline": round(cold["seconds"] / baseline["seconds"], 3) if baseline else None,
        "median_full_build_over_baseline": round(statistics.median(full) / baseline["seconds"], 3) if baseline else None,
        "runtime": subprocess.run(["apptainer", "--version"], capture_output=True, text=True, check=False).stdout.strip(),
        "cpus": os.cpu_count(),
        "failures": failures,
        "ok": not failures,
    }


if __name__ == "__main__":
    sys.exit(main())
