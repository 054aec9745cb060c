"""``orchestrator remote install``: this side's version of the orchestrator on the login node, in a venv.

The venv is ``<login.root>/.orchestrator/venv-VERSION`` (:meth:`~orchestrator.remote.destination.Destination.venv`); once it is
there, every ``--remote`` command runs its ``orchestrator`` (:meth:`Session.open`), so the two
sides run the same version whatever the login shell's PATH holds.

What is installed, in this order of preference:

1. the wheel of this version in ``--wheels DIR`` (``pip download`` or ``pip wheel`` beforehand);
2. a wheel built here from the source tree this side runs from (a clone, ``pip install -e``):
   the exact code, which no index has;
3. ``dvc-slurm-orchestrator==VERSION`` from the login node's package index (an install from
   a wheel or PyPI here has no source to build from).

The wheel goes over the session's ssh connection (rsync through its master), since not every
login node reaches PyPI; the dependencies (DVC, ...) come from the login node's index, or with
``--wheels DIR`` from the wheels sent along only (``--no-index``: a node without the internet
fails fast and says which one is missing rather than waiting on timeouts).
``--system-site-packages``: the venv sees the interpreter's own packages (a site's Python
module that brings numpy, or a test's machine), and pip installs only what they lack.
"""

from __future__ import annotations

import re
import shlex
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator import __version__
from orchestrator.remote.session import DISTRIBUTION, TAG, Session, _said, command, markers
from orchestrator.util.runner import Runner
from orchestrator.util.ssh import RemoteError

# The file names pip gives a wheel of this distribution (its name with '_' for '-').
WHEEL_NAME = re.compile(rf"{DISTRIBUTION.replace('-', '_')}-(?P<version>[^-]+)-.*\.whl")
SOURCE_DIR = Path(__file__).resolve().parents[2]  # the tree this package runs from, where it is a clone
MIN_PYTHON = (3, 10)  # pyproject.toml's requires-python

# On the login node, after login.setup: $1 the venv, $2 the Python that makes it, $3 "system" for
# --system-site-packages, $4 the folder the wheels were sent to (pip's --find-links), $5 what pip
# installs (a wheel's path, or DISTRIBUTION==VERSION), $6 "offline" for --no-index. First the
# orchestrator alone (--force-reinstall: a copy of the same version outside the venv, seen through
# --system-site-packages, must not stand in for it), then its dependencies. Says the venv's version.
INSTALL = (
    f"T='{TAG}'; "
    'n=$1; shift; while [ "$n" -gt 0 ]; do eval "$1" || { printf "%s setup-failed %s\\n" "$T" "$1" >&2; exit 96; }; '
    "shift; n=$((n-1)); done; "
    'py=$2; if command -v "$py" >/dev/null 2>&1; then :; else printf "%s no-python %s\\n" "$T" "$py" >&2; exit 95; fi; '
    f'if "$py" -c "import sys; sys.exit(sys.version_info < {MIN_PYTHON})"; then :; else '
    'printf "%s old-python %s\\n" "$T" "$("$py" --version 2>&1)" >&2; exit 95; fi; '
    'mkdir -p -- "$4" || exit 97; cd -- "$4" || exit 97; '
    'if [ -x "$1/bin/python" ]; then :; else "$py" -m venv ${3:+--system-site-packages} -- "$1" || exit 94; fi; '
    '"$1/bin/python" -m pip --disable-pip-version-check install -q --find-links . ${6:+--no-index} --no-deps --force-reinstall -- "$5" '
    "|| exit 93; "
    '"$1/bin/python" -m pip --disable-pip-version-check install -q --find-links . ${6:+--no-index} -- "$5" || exit 93; '
    'printf "%s installed %s\\n" "$T" "$("$1/bin/orchestrator" --version 2>&1)"; exit 0'
)


@dataclass(frozen=True)
class Source:
    """What is sent and what pip installs there."""

    files: tuple[Path, ...]  # sent to the staging folder there
    requirement: str  # a sent wheel's ./NAME, or DISTRIBUTION==VERSION
    offline: bool  # --no-index: only the wheels sent


def source(wheels: Path | None, build_in: Path, runner: Runner, say: Callable[[str], None]) -> Source:
    """What to install there (see the module's docstring); builds this side's wheel where that is the way."""
    sent: list[Path] = []
    if wheels is not None:
        if not wheels.is_dir():
            raise RemoteError(f"--wheels {wheels}: no such folder (the wheels to send along: pip download -d DIR ...)")
        sent = sorted(p for p in wheels.iterdir() if p.is_file() and p.suffix in (".whl", ".gz", ".zip"))
    ours = [p for p in sent if (m := WHEEL_NAME.fullmatch(p.name)) and m["version"] == __version__]
    others = [p for p in sent if WHEEL_NAME.fullmatch(p.name) and p not in ours]
    sent = [p for p in sent if p not in others]  # another version's wheel must not be the one pip picks
    if not ours and (SOURCE_DIR / "pyproject.toml").is_file():
        say(f"building the wheel of {DISTRIBUTION} {__version__} from {SOURCE_DIR}")
        ours = [build_wheel(SOURCE_DIR, build_in, runner)]
        sent.append(ours[0])
    requirement = f"./{ours[0].name}" if ours else f"{DISTRIBUTION}=={__version__}"
    return Source(tuple(sent), requirement, wheels is not None)


def build_wheel(tree: Path, into: Path, runner: Runner) -> Path:
    """``pip wheel --no-deps`` of ``tree`` into ``into``: the wheel, checked to be this side's version."""
    done = runner.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(into), "--", str(tree)], timeout=600)
    built = [(p, m) for p in into.glob("*.whl") if (m := WHEEL_NAME.fullmatch(p.name))]
    if done.returncode != 0 or not built:
        raise RemoteError(
            f"cannot build the wheel of {tree} here (pip wheel, exit {done.returncode})",
            done.stderr.strip().splitlines()[-8:],
            hints=["build it yourself (python3 -m pip wheel --no-deps -w DIR .) and pass --wheels DIR"],
        )
    wheel, name = built[0]
    version = name["version"]
    if version != __version__:
        raise RemoteError(f"{tree} builds {DISTRIBUTION} {version}, but this side runs {__version__}: nothing was sent")
    return wheel


def install(session: Session, runner: Runner, wheels: Path | None, python: str, system_site: bool, say: Callable[[str], None]) -> str:
    """This side's version in the venv there (see the module's docstring); the venv's path."""
    facts, dest = session.facts, session.dest
    venv = dest.venv(facts.user, facts.home)
    staging = f"{venv}.wheels"  # beside the venv: what it was installed from, for a look afterwards
    with tempfile.TemporaryDirectory(prefix="orchestrator-wheel-") as tmp:
        src = source(wheels, Path(tmp), runner, say)
        if src.files:
            send(session, runner, src.files, staging, say)
        say(f"installing {DISTRIBUTION} {__version__} in {dest.host}:{venv}" + (" (only the wheels sent)" if src.offline else ""))
        line = command(INSTALL, venv, python, "system" if system_site else "", staging, src.requirement,
                       "offline" if src.offline else "", setup=dest.setup)  # fmt: skip
        done = session.conn.run(line, retry=False)
    said = {words[0]: " ".join(words[1:]) for words in markers(done.stdout + "\n" + done.stderr)}
    if "no-python" in said or "old-python" in said:
        found = f"{python!r} is not there" if "no-python" in said else f"{python} is {said['old-python'].strip()}"
        raise RemoteError(
            f"no Python {'.'.join(map(str, MIN_PYTHON))} or newer to make the venv on {dest.host}: {found}; nothing was installed",
            hints=["name one: --python PATH, or load a module first (the profile's login.setup, e.g. module load cray-python)"],
        )
    if "setup-failed" in said:
        raise RemoteError(f"a line of login.setup failed on {dest.host}: {said['setup-failed']}")
    if done.returncode != 0 or "installed" not in said:
        what = {94: f"{python} -m venv failed", 93: "pip install failed", 97: f"cannot make {staging}"}.get(done.returncode, "failed")
        hints = [f"without the internet there: pip download {DISTRIBUTION}=={__version__} -d DIR here (same Python and platform "
                 "as the login node: --python-version, --platform), then --wheels DIR"] if done.returncode == 93 else []  # fmt: skip
        raise RemoteError(f"installing on {dest.host} failed: {what} (exit {done.returncode})", _said(done), hints=hints)
    there = re.search(r"version\s+(\S+)", said["installed"])
    if not there or there.group(1) != __version__:
        raise RemoteError(f"the venv {dest.host}:{venv} runs {said['installed']!r} after the install, not {__version__}")
    return venv


def send(session: Session, runner: Runner, files: tuple[Path, ...], staging: str, say: Callable[[str], None]) -> None:
    """``files`` into ``staging`` there, by rsync through the session's ssh master."""
    dest = session.dest
    made = session.conn.run(command('mkdir -p -- "$1"', staging))
    if made.returncode != 0:
        raise RemoteError(f"cannot make {staging} on {dest.host}", _said(made))
    say(f"sending {len(files)} wheel(s) to {dest.host}:{staging}")
    # -s: the remote path goes over rsync's protocol, not through the remote shell (spaces, quotes).
    argv = ["rsync", "-t", "-s", "-e", shlex.join(session.conn.base()), "--", *map(str, files), f"{dest.host}:{staging}/"]
    try:
        done = runner.run(argv, timeout=None)
    except FileNotFoundError:
        raise RemoteError("rsync is not installed here: the wheels go to the login node with rsync over ssh") from None
    if done.returncode != 0:
        raise RemoteError(f"sending the wheels to {dest.host}:{staging} failed (rsync, exit {done.returncode})", _said(done))
