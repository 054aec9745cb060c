"""``orchestrator remote install``: this side's version of the orchestrator on the login node, in a venv.

The venv is ``<login.root>/.orchestrator/venv-VERSION`` (:meth:`~orchestrator.remote.destination.Destination.venv`); once it is
there, every ``--remote`` command runs its ``orchestrator`` (:meth:`Session.open`), so the two
sides run the same version whatever the login shell's PATH holds.

This version's own wheel is always sent (over the session's ssh connection, rsync through its
master): no index has a clone's code, and not every login node reaches PyPI. It is, in this
order of preference:

1. the wheel of this version in ``--wheels DIR`` (``pip download`` or ``pip wheel`` beforehand);
2. a wheel built here from the source tree this side runs from (a clone, ``pip install -e``):
   the exact code;
3. where this side was installed from a wheel, that wheel file, if it is still where pip
   recorded it (PEP 610's ``direct_url.json``) and its hash is the one recorded;
4. else a wheel re-packed from the installed files (an install from PyPI, or a wheel since
   deleted): the files pip's RECORD lists, each checked against the hash RECORD gives it, so
   what is sent is what was installed, byte for byte;
5. else one error that names ``--wheels DIR``.

The dependencies (DVC, ...) come from the login node's package index, with the wheels of
``--wheels DIR`` sent along and found first (pip's ``--find-links``); ``--no-index``, for a
login node without the internet, installs from the wheels sent only (fails fast, naming the
one missing, rather than waiting on timeouts). ``--system-site-packages``: the venv sees the
interpreter's own packages (a site's Python module that brings numpy, or a test's machine),
and pip installs only what they lack.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
import shlex
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from orchestrator import __version__
from orchestrator.remote.session import DISTRIBUTION, TAG, Session, _said, command, markers
from orchestrator.util.runner import Runner
from orchestrator.util.ssh import RemoteError

# The file names pip gives a wheel of this distribution (its name with '_' for '-').
WHEEL_NAME = re.compile(rf"{DISTRIBUTION.replace('-', '_')}-(?P<version>[^-]+)-.*\.whl")
SOURCE_DIR = Path(__file__).resolve().parents[2]  # the tree this package runs from, where it is a clone
MIN_PYTHON = (3, 10)  # pyproject.toml's requires-python

# On the login node, after login.setup: $1 the venv, $2 the Python that makes it, $3 "system" for
# --system-site-packages, $4 the folder the wheels were sent to (pip's --find-links), $5 the sent
# wheel of this version (./NAME), $6 "offline" for --no-index. First the orchestrator alone
# (--force-reinstall: a copy of the same version outside the venv, seen through
# --system-site-packages, must not stand in for it; exit 93), then its dependencies (exit 92): the
# two exits tell which one pip failed at. Says the venv's version.
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
    '"$1/bin/python" -m pip --disable-pip-version-check install -q --find-links . ${6:+--no-index} -- "$5" || exit 92; '
    'printf "%s installed %s\\n" "$T" "$("$1/bin/orchestrator" --version 2>&1)"; exit 0'
)

# What pip prints when it cannot reach the index (urllib3's and the resolver's words, the OS's
# resolver and socket errors): only then is the way for a node without the internet the hint. A
# requirement the index simply lacks is not this, and says so itself. Under -q pip says it in its
# retries' warnings (5 by default), not of the last attempt: a pip set to retry 0 times looks like
# an index without the requirement.
NO_NETWORK = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|Name or service not known"
    r"|nodename nor servname|Network is unreachable|No route to host|Connection refused|ConnectTimeoutError|Read timed out"
    r"|ReadTimeoutError|ProxyError|SSLError|connection broken by|Max retries exceeded|Could not fetch URL"
)
MISSING = re.compile(r"No matching distribution found for (?P<requirement>\S+)")
# The files of a dist-info folder that pip writes at the install (PEP 376, 610, 627), not the wheel's:
# left out of a re-packed wheel (RECORD is written anew, with the hashes of what it holds).
INSTALLER_FILES = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "RECORD.jws", "RECORD.p7s"})


@dataclass(frozen=True)
class Source:
    """What is sent and what pip installs there."""

    files: tuple[Path, ...]  # sent to the staging folder there
    requirement: str  # the sent wheel of this version: ./NAME
    wheel: Path  # that wheel here (in a temporary folder where it was built or re-packed)
    offline: bool  # --no-index: only the wheels sent


class NoWheel(Exception):
    """This side's installed files cannot be put back into its wheel; the message says why."""


def source(wheels: Path | None, no_index: bool, build_in: Path, runner: Runner, say: Callable[[str], None]) -> Source:
    """What to install there (see the module's docstring); builds or re-packs this side's wheel where that is the way."""
    sent: list[Path] = []
    if wheels is not None:
        if not wheels.is_dir():
            raise RemoteError(f"--wheels {wheels}: no such folder (the wheels to send along: pip download -d DIR ...)")
        sent = sorted(p for p in wheels.iterdir() if p.is_file() and p.suffix in (".whl", ".gz", ".zip"))
    ours = [p for p in sent if (m := WHEEL_NAME.fullmatch(p.name)) and m["version"] == __version__]
    others = [p for p in sent if WHEEL_NAME.fullmatch(p.name) and p not in ours]
    sent = [p for p in sent if p not in others]  # another version's wheel must not be the one pip picks
    if not ours:
        wheel = this_wheel(build_in, runner, say)
        ours = [wheel]
        sent.append(wheel)
    return Source(tuple(sent), f"./{ours[0].name}", ours[0], no_index)


def this_wheel(build_in: Path, runner: Runner, say: Callable[[str], None]) -> Path:
    """The wheel of the code this side runs: built from its source tree, or the one it was installed
    from, or its installed files re-packed (the module's docstring); one error where none of them is."""
    if (SOURCE_DIR / "pyproject.toml").is_file():
        say(f"building the wheel of {DISTRIBUTION} {__version__} from {SOURCE_DIR}")
        return build_wheel(SOURCE_DIR, build_in, runner)
    dist = running_distribution()
    here = Path(__file__).resolve().parents[1]
    why = f"this orchestrator ({here}) is neither in a source tree nor in an install whose files pip's RECORD lists"
    if dist is not None:
        found = installed_from(dist, say)
        if found is not None:
            say(f"sending the wheel this orchestrator was installed from: {found}")
            return found
        try:
            wheel = repack(dist, build_in)
        except NoWheel as exc:
            why = str(exc)
        else:
            say(f"re-packed the installed files of {DISTRIBUTION} {__version__} (as pip's RECORD lists them) into {wheel.name}")
            return wheel
    raise RemoteError(
        f"no wheel of {DISTRIBUTION} {__version__} to send to the login node: {why}; nothing was sent",
        hints=[
            f"put this version's wheel ({DISTRIBUTION.replace('-', '_')}-{__version__}-*.whl: the one you installed, or "
            "python3 -m pip wheel --no-deps -w DIR . in a clone of this version) in a folder and pass --wheels DIR"
        ],
    )


def running_distribution() -> metadata.Distribution | None:
    """The installed distribution whose files hold this very module: the one this side runs from,
    where a wheel was installed (an editable install lists a .pth and a finder, not this file; a
    copy of another version elsewhere on sys.path lists its own)."""
    here = Path(__file__).resolve()
    for dist in metadata.distributions(name=DISTRIBUTION):
        for f in dist.files or ():
            if f.name == here.name and Path(str(dist.locate_file(f))).resolve() == here:
                return dist
    return None


def installed_from(dist: metadata.Distribution, say: Callable[[str], None]) -> Path | None:
    """The wheel file ``dist`` was installed from, where pip recorded it (``direct_url.json``:
    ``pip install path/to/x.whl``), it is still there and its hash is the recorded one."""
    try:
        recorded = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        return None
    if not isinstance(recorded, dict) or not isinstance(archive := recorded.get("archive_info"), dict):
        return None  # none recorded (an index's wheel), or a folder's install (dir_info), or a VCS's
    url = urlparse(str(recorded.get("url", "")))
    if url.scheme != "file" or url.netloc not in ("", "localhost"):
        return None  # downloaded (https://...): not here to send
    path = Path(unquote(url.path))
    if not ((m := WHEEL_NAME.fullmatch(path.name)) and m["version"] == __version__ and path.is_file()):
        return None
    hashes = archive.get("hashes")
    if not isinstance(hashes, dict):
        hashes = {}
    if not hashes and isinstance(archive.get("hash"), str) and "=" in archive["hash"]:  # PEP 610's older field
        algorithm, _, value = archive["hash"].partition("=")
        hashes = {algorithm: value}
    usable = {a: v for a, v in hashes.items() if a in hashlib.algorithms_guaranteed and isinstance(v, str)}
    if not usable:
        return None  # nothing to tell it from another file of the same name
    algorithm = "sha256" if "sha256" in usable else sorted(usable)[0]
    if hashlib.new(algorithm, path.read_bytes()).hexdigest() != usable[algorithm].lower():
        say(f"{path}, the wheel this orchestrator was installed from, has changed since: not sent")
        return None
    return path


def repack(dist: metadata.Distribution, into: Path) -> Path:
    """``dist``'s wheel again, from its installed files, in ``into``: every file its RECORD lists in
    site-packages, each checked against the hash RECORD gives it (a file changed after the install
    is refused, not sent), less what an install adds (bytecode, entry-point scripts, the
    installer's files in the dist-info); a RECORD of its own. No library does this (``wheel pack``
    needs the ``wheel`` package, which this tool does not depend on; pip and ``installer`` only
    install), and a wheel is only a zip with a RECORD (PEP 427)."""
    files = dist.files
    info = next((f.parts[0] for f in files or () if len(f.parts) == 2 and f.parts[1] == "RECORD"), None)
    if not files or info is None or not info.endswith(".dist-info"):
        raise NoWheel("its dist-info has no RECORD (the list of the files pip installed)")
    scripts = {ep.name for ep in dist.entry_points if ep.group in ("console_scripts", "gui_scripts")}
    entries: list[tuple[str, bytes, int]] = []  # name in the wheel, content, mode
    for f in files:
        # Bytecode pip compiled at the install, wherever it went (PYTHONPYCACHEPREFIX puts it outside
        # site-packages): the install's, not the wheel's.
        if "__pycache__" in f.parts or f.suffix == ".pyc" or (f.parts[0] == info and f.name in INSTALLER_FILES):
            continue
        if f.parts[0] == "..":
            if f.name in scripts:  # made at the install from entry_points.txt, which the wheel carries
                continue
            raise NoWheel(f"it installed {f.as_posix()} outside site-packages (a wheel's data or script), which cannot be put back")
        path = Path(str(dist.locate_file(f)))
        if f.hash is None or f.hash.mode not in hashlib.algorithms_guaranteed:
            raise NoWheel(f"its RECORD gives {f.as_posix()} no hash to check it against")
        try:
            data, mode = path.read_bytes(), path.stat().st_mode
        except OSError as exc:
            raise NoWheel(f"{path} cannot be read ({exc.strerror or exc}): the install is incomplete") from None
        if _digest(f.hash.mode, data) != f.hash.value:
            raise NoWheel(f"{path} was changed after the install (its hash is not the one pip's RECORD gives)")
        entries.append((f.as_posix(), data, mode))
    wheel_text = dist.read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel_text.splitlines() if line.startswith("Tag:")]
    name = f"{info.removesuffix('.dist-info')}-{_compressed(tags)}.whl" if tags else ""
    if not ((m := WHEEL_NAME.fullmatch(name)) and m["version"] == __version__):
        raise NoWheel(f"its dist-info ({info}, tags {tags or 'none'}) does not name a wheel of {__version__}")
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    # The package's files first and the dist-info last, RECORD at the very end (PEP 427's advice).
    entries.sort(key=lambda e: (e[0].startswith(f"{info}/"), e[0]))
    for arcname, data, _ in entries:
        writer.writerow([arcname, f"sha256={_digest('sha256', data)}", len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    wheel = into / name
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname, data, mode in [*entries, (f"{info}/RECORD", record.getvalue().encode(), 0o100644)]:
            entry = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))  # the same files: the same wheel
            entry.external_attr = (mode & 0xFFFF) << 16  # the mode bits unzip and pip restore
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
    return wheel


def _digest(algorithm: str, data: bytes) -> str:
    """RECORD's form of a hash: urlsafe base64 without the padding."""
    return base64.urlsafe_b64encode(hashlib.new(algorithm, data).digest()).rstrip(b"=").decode()


def _compressed(tags: list[str]) -> str:
    """WHEEL's Tag lines as a wheel's file name has them (py2-none-any and py3-none-any: py2.py3-none-any)."""
    parts = [t.split("-") for t in tags]
    return "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))


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


def install(
    session: Session,
    runner: Runner,
    wheels: Path | None,
    python: str,
    system_site: bool,
    say: Callable[[str], None],
    no_index: bool = False,
) -> str:
    """This side's version in the venv there (see the module's docstring); the venv's path."""
    facts, dest = session.facts, session.dest
    venv = dest.venv(facts.user, facts.home)
    staging = f"{venv}.wheels"  # beside the venv: what it was installed from, for a look afterwards
    with tempfile.TemporaryDirectory(prefix="orchestrator-wheel-") as tmp:
        src = source(wheels, no_index, Path(tmp), runner, say)
        send(session, runner, src.files, staging, say)
        only = " (only the wheels sent: --no-index)" if src.offline else ""
        say(f"installing {DISTRIBUTION} {__version__} in {dest.host}:{venv}{only}")
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
    if done.returncode in (92, 93):
        raise pip_failed(dest.host, done.returncode, done.stdout + "\n" + done.stderr, src, wheels)
    if done.returncode != 0 or "installed" not in said:
        what = {94: f"{python} -m venv failed", 97: f"cannot make {staging}"}.get(done.returncode, "failed")
        raise RemoteError(f"installing on {dest.host} failed: {what} (exit {done.returncode})", _said(done))
    there = re.search(r"version\s+(\S+)", said["installed"])
    if not there or there.group(1) != __version__:
        raise RemoteError(f"the venv {dest.host}:{venv} runs {said['installed']!r} after the install, not {__version__}")
    return venv


def pip_failed(host: str, code: int, output: str, src: Source, wheels: Path | None) -> RemoteError:
    """The error of a pip install there that failed (exit 93: this version's wheel; 92: its
    dependencies): what pip said, and the way for a node without the internet only where pip
    could not reach its index."""
    lines = [line.rstrip() for line in output.splitlines() if line.strip() and not line.startswith(TAG)]
    errors = [line for line in lines if line.startswith("ERROR:")]
    network = [line for line in lines if NO_NETWORK.search(line)]
    # pip's own last word, and one of its retries' (they repeat) where the network is what failed.
    shown = (network[-1:] if network and network[-1] not in errors else []) + (errors[-6:] or lines[-8:])
    what = f"the wheel of {DISTRIBUTION} {__version__}" if code == 93 else f"the dependencies of {DISTRIBUTION}"
    missing = [m["requirement"] for line in errors if (m := MISSING.search(line))]
    # The wheel to name in a hint: the one sent, where it lies here still (--wheels, the installed one), else in words.
    wheel = shlex.quote(str(src.wheel)) if src.wheel.is_file() else "WHEEL (this version's wheel, or . in a clone of it)"
    platform = "with --python-version, --platform and --only-binary :all: of the login node's Python where they differ"
    hints: list[str] = []
    cause = ""
    if network and not src.offline:
        cause = ": pip there cannot reach its package index"
        folder = shlex.quote(str(wheels)) if wheels is not None else "DIR"  # quoted: a command to copy
        hints = [
            f"a login node without the internet: fetch the dependencies' wheels here, pip download -d {folder} {wheel} "
            f"({platform}), then --wheels {folder} --no-index",
            "behind a proxy: export HTTPS_PROXY=... in the profile's login.setup",
        ]
    elif missing and src.offline:
        cause = f": {', '.join(missing)} is not among the wheels sent (--no-index: nothing else is looked at)"
        folder = shlex.quote(str(wheels)) if wheels is not None else "DIR"
        hints = [f"send its wheel along: pip download -d {folder} {shlex.quote(missing[0])} ({platform}), then --wheels {folder}"]
    elif missing:
        cause = f": the login node's package index has no {', '.join(missing)} (for its Python and platform)"
    return RemoteError(f"installing on {host} failed: pip could not install {what}{cause}", shown, hints=hints)


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
