"""Running ``orchestrator ARGS`` in the project's folder on the login node, and following it from here.

A session first asks the login node, in one round trip, who the user is, where home
is, whether git is there, and ``orchestrator --version``: the versions must be equal
(the remote writes the ledger, scripts and records this side reads, and runs the same
plan), otherwise :class:`VersionMismatch` names both and how to install; a login node
without it is :class:`NotInstalled`. Nothing is sent before that check passes.

The command runs DETACHED there (``setsid nohup``, its output to
``.orchestrator/remote/<run>/log`` in the project folder, its exit status to ``status``
beside it), and this side streams that log (``tail -f --pid``) until the process ends,
then exits with its status. So:

- a dropped connection stops only the streaming: the command goes on there, and this
  side reconnects (up to connection.RETRIES times, backing off) and streams on from
  the byte it had (the log is a file; the offset is exact);
- Ctrl-C here stops only the streaming too, and says so, and how to follow it again
  (``orchestrator remote attach``);
- a submit cut off anywhere (after ``sbatch``, before the ledger was written) finishes
  there alone: the remote ledger is complete when it ends, and the next submit reads it.
  While a submit of the project is still running there, another one attaches to it
  instead of starting a second (``flock`` on ``.orchestrator/remote/submit.lock``, held
  by the detached process for its whole life): two submits never race on one ledger.

Remote commands are ``bash -lc SCRIPT bash ARG...``: a login shell, so ``module`` and
what ``~/.bash_profile`` sets up are there, with the profile's ``login.setup`` lines run
first (each on its own, with ``eval``). Each script is one line in single quotes (what
csh and tcsh login shells parse too), every value a positional parameter, never spliced
into the script; markers for this side go to stderr as ``orchestrator-remote: WORD ...``
lines, so stdout is the log's bytes and nothing else.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from orchestrator import __version__
from orchestrator.remote import connection
from orchestrator.remote.connection import Connection
from orchestrator.remote.destination import Destination
from orchestrator.util.ssh import ConnectionLost, RemoteError, classify

TAG = "orchestrator-remote:"
RUNS_DIR = ".orchestrator/remote"
DISTRIBUTION = "dvc-slurm-orchestrator"  # the name pip knows it by (PyPI's "orchestrator" is another project)
INSTALL = "orchestrator remote install"  # puts this side's version in a venv there (orchestrator.remote.install)
VENVS_DIR = ".orchestrator"  # in login.root: venv-<version>, one per version, shared by the projects there


def install_hint(command: str = INSTALL) -> str:
    return f"put this side's version there, from here: {command} (a venv in <login.root>/{VENVS_DIR}/venv-{__version__}, used by --remote)"


class NotInstalled(RemoteError):
    """The login node's login shell finds no ``orchestrator``."""


class VersionMismatch(RemoteError):
    """The login node runs another version of the orchestrator than this side."""


class ForeignProject(RemoteError):
    """The project's folder on the cluster holds another project (a clone of the same folder name)."""


# Runs the profile's login.setup lines: $1 is their count, then the lines; each eval'd on its own.
_SETUP = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do eval "$1" || { printf "%s setup-failed %s\\n" "$T" "$1" >&2; exit 96; }; '
    "shift; n=$((n-1)); done; "
)
PROBE = (
    f"T='{TAG}'; {_SETUP}"
    'printf "%s user %s\\n" "$T" "$(id -un)"; printf "%s home %s\\n" "$T" "$HOME"; '
    'if command -v git >/dev/null 2>&1; then printf "%s git yes\\n" "$T"; fi; '
    'if command -v flock >/dev/null 2>&1 && command -v setsid >/dev/null 2>&1; then printf "%s tools yes\\n" "$T"; fi; '
    'if v=$(orchestrator --version 2>/dev/null); then printf "%s version %s\\n" "$T" "$v"; fi; exit 0'
)
# $1: the venv `orchestrator remote install` makes (destination.Destination.venv); says its version.
VENV_PROBE = (
    f"T='{TAG}'; "
    + 'v="$1/bin/orchestrator"; if [ -x "$v" ] && o=$("$v" --version 2>/dev/null); then printf "%s venv %s\\n" "$T" "$o"; fi; exit 0'
)


def activate(venv: str) -> str:
    """The login.setup line that puts ``venv``'s ``orchestrator`` (and its ``dvc``) first on PATH: every
    script that runs the orchestrator there runs login.setup first. Exported, so that what it starts
    (dvc, the stages' `orchestrator run`, sbatch's environment) finds the same."""
    return f"PATH={shlex.quote(venv + '/bin')}:$PATH; export PATH"


# $1: the repository's folder; $2: the project folder; $3: this repository's identity (its
# root commits, space-separated; "": none yet). Makes the repository (git init), records the
# identity of the project it holds where none is (a folder synced before identities were
# recorded: the root commits of what was pushed there), says which it holds and whether a
# submit of the project is running there.
PROJECT_FILE = ".git/orchestrator-project"
PREPARE = (
    f"T='{TAG}'; {_SETUP}"
    'mkdir -p -- "$1" || exit 97; cd -- "$1" || exit 97; '
    'if [ -d .git ]; then :; else git init -q . || exit 97; printf "%s created\\n" "$T"; fi; '
    f"f={PROJECT_FILE}; "
    'if [ ! -s "$f" ]; then r=$(git rev-list --max-parents=0 refs/orchestrator/head 2>/dev/null | tr "\\n" " "); '
    '[ -n "$r" ] || r=$3; if [ -n "$r" ]; then printf "%s\\n" "$r" > "$f"; fi; fi; '
    'if [ -s "$f" ]; then printf "%s project %s\\n" "$T" "$(cat "$f")"; fi; '
    'mkdir -p -- "$2" || exit 97; cd -- "$2" || exit 97; '
    f"lock={RUNS_DIR}/submit.lock; "
    'if [ -e "$lock" ]; then if flock -n "$lock" true; then :; else '
    f'printf "%s busy %s\\n" "$T" "$(cat {RUNS_DIR}/submit.run 2>/dev/null)"; fi; fi; exit 0'
)
# Follows run $2 of project folder $1 from byte $3 of its log; says how it ended.
_FOLLOW = (
    'd=$r/$id; p=$(cat "$d/pid" 2>/dev/null); '
    'if [ -z "$p" ]; then printf "%s no-run %s\\n" "$T" "$id" >&2; exit 98; fi; '
    'tail -c +$((off+1)) -s 0.2 --pid="$p" -f "$d/log"; '
    'if [ -f "$d/status" ]; then printf "%s exit %s\\n" "$T" "$(cat "$d/status")" >&2; '
    'else printf "%s lost\\n" "$T" >&2; fi; exit 0'
)
FOLLOW = (
    f"T='{TAG}'; r={RUNS_DIR}; "
    'cd -- "$1" || { printf "%s no-folder\\n" "$T" >&2; exit 97; }; id=$2; off=$3; '
    'if [ -z "$id" ]; then id=$(cd "$r" 2>/dev/null && ls -1td -- */ 2>/dev/null | head -n 1); id=${id%/}; fi; ' + _FOLLOW
)
# Each run leaves its folder (argv, log, pid, status) for `remote attach` and for reading
# later; without an end they would pile up over months of submits and status calls. The
# newest KEEP_RUNS finished ones stay: far more than anyone follows back, small (logs of
# the login node's side only; the jobs' own logs are elsewhere).
KEEP_RUNS = 50
# In $r (the runs' folder): removes the oldest finished runs beyond KEEP_RUNS. Run ids start
# with their UTC start time, so the glob's order is their age. Never a running one: one
# without a status, or whose pid is alive.
PRUNE = (
    'n=0; for x in "$r"/*/; do if [ -f "${x}status" ]; then n=$((n+1)); fi; done; '
    f'for x in "$r"/*/; do [ "$n" -gt {KEEP_RUNS} ] || break; '
    'if [ -f "${x}status" ]; then p=$(cat "${x}pid" 2>/dev/null); '
    'if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then :; else rm -rf -- "$x"; n=$((n-1)); fi; fi; done; '
)
# $1: project folder; $2: run id; $3: submit or other; then orchestrator's arguments.
# A submit takes the project's lock (fd 9) and hands it to the detached process: while
# that runs, the next submit finds the lock taken and follows that run instead.
RUN = (
    f"T='{TAG}'; r={RUNS_DIR}; {_SETUP}"
    'cd -- "$1" || { printf "%s no-folder\\n" "$T" >&2; exit 97; }; '
    'mkdir -p "$r" || exit 97; id=$2; kind=$3; shift 3; off=0; '
    'if [ "$kind" = submit ]; then exec 9>>"$r/submit.lock"; '
    'if flock -n 9; then printf "%s\\n" "$id" > "$r/submit.run"; '
    'else exec 9>&-; sleep 1; id=$(cat "$r/submit.run"); kind=attached; fi; fi; '
    'if [ "$kind" = attached ]; then printf "%s attached %s %s\\n" "$T" "$id" "$(cat "$r/$id/argv" 2>/dev/null)" >&2; else '
    f"{PRUNE}"
    'd=$r/$id; mkdir -p "$d" || exit 97; printf "%s\\n" "$*" > "$d/argv"; : > "$d/log"; '
    '( setsid nohup sh -c \'orchestrator "$@" 9>&-; echo $? > "$0/status.part"; mv "$0/status.part" "$0/status"\' "$d" "$@" '
    '> "$d/log" 2>&1 < /dev/null & echo $! > "$d/pid" ); exec 9>&-; '
    'printf "%s started %s\\n" "$T" "$id" >&2; fi; ' + _FOLLOW
)

# $1: a folder; then a command: run there after login.setup (each line eval'd; 96: one failed).
IN_FOLDER = 'n=$1; shift; while [ "$n" -gt 0 ]; do eval "$1" || exit 96; shift; n=$((n-1)); done; cd -- "$1" || exit 97; shift; "$@"'


def command(script: str, *args: str, setup: Sequence[str] | None = None) -> str:
    """The line ssh sends: ``bash -lc SCRIPT bash [N SETUP...] ARG...``, every word quoted."""
    words = [] if setup is None else [str(len(setup)), *setup]
    return shlex.join(["bash", "-lc", script, "bash", *words, *args])


def markers(text: str) -> list[list[str]]:
    """Our marker lines in ``text`` (stderr or stdout), as words after the tag."""
    return [line[len(TAG) :].lstrip().split(" ", 2) for line in text.splitlines() if line.startswith(TAG)]


@dataclass(frozen=True)
class Facts:
    """What the probe found on the login node."""

    user: str
    home: str
    git: bool
    tools: bool  # flock and setsid (util-linux)
    version: str | None  # orchestrator --version's version; None: not found


def parse_probe(stdout: str) -> Facts:
    found: dict[str, str] = {}
    for words in markers(stdout):
        found[words[0]] = " ".join(words[1:]).strip()
    return Facts(found.get("user", ""), found.get("home", ""), "git" in found, "tools" in found, _version(found.get("version")))


def _version(said: str | None) -> str | None:
    """The version in what ``orchestrator --version`` printed ("orchestrator, version 0.1.0")."""
    match = re.search(r"version\s+(\S+)", said or "")
    return match.group(1) if match else said


def check(facts: Facts, host: str, setup: Sequence[str], install: str = INSTALL) -> None:
    """Refuse a login node this side cannot work with: one message, nothing sent. ``install``: the
    command that puts this side's version there (with this command's --cluster and --project)."""
    where = "the login shell's PATH (bash -l)" + (" after login.setup" if setup else "")
    if facts.version is None:
        raise NotInstalled(
            f"the orchestrator is not installed on {host}: no `orchestrator` on {where}, nor in a venv of `{INSTALL}`; nothing was sent",
            hints=[
                install_hint(install),
                "or, installed there another way (a venv, a module): add `source VENV/bin/activate` (or `module load ...`) "
                "to the profile's login.setup, or to ~/.bash_profile on the login node",
            ],
        )
    if facts.version != __version__:
        raise VersionMismatch(
            f"{host} runs orchestrator {facts.version}, this side {__version__}: both must run the same version "
            "(the login node writes the ledger and scripts this side reads); nothing was sent",
            hints=[install_hint(install), f"or install {facts.version} here: pip install '{DISTRIBUTION}=={facts.version}'"],
        )
    if not facts.git:
        raise RemoteError(f"git is not installed on {host} (not on {where}): the project is sent there as git commits")
    if not facts.tools:
        raise RemoteError(f"{host} lacks flock or setsid (util-linux), which run the command detached there")


@dataclass
class Session:
    """A connection to the login node, checked, and the project's folder there."""

    conn: Connection
    dest: Destination
    facts: Facts

    @classmethod
    def open(cls, conn: Connection, dest: Destination, install: str = INSTALL, checked: bool = True) -> Session:
        """Log in and probe; where the venv of this side's version is there (``orchestrator remote
        install`` made it), every later command there runs its ``orchestrator``. ``checked``: refuse a
        login node without this side's version (:func:`check`); the install itself opens unchecked."""
        conn.connect()
        done = conn.run(command(PROBE, setup=dest.setup))
        if done.returncode == 96:
            raise RemoteError(f"a line of login.setup failed on {dest.host}", [*_said(done), *dest.setup])
        facts = parse_probe(done.stdout)
        # A second round trip (over the master: milliseconds): the venv's path needs the user and home the probe found.
        venv = dest.venv(facts.user, facts.home)
        found = {words[0]: " ".join(words[1:]) for words in markers(conn.run(command(VENV_PROBE, venv)).stdout)}
        if "venv" in found:
            facts = replace(facts, version=_version(found["venv"]))
            dest = replace(dest, setup=(*dest.setup, activate(venv)))
        if checked:
            check(facts, dest.host, dest.setup, install)
        return cls(conn, dest, facts)

    @property
    def folder(self) -> str:
        return self.dest.folder(self.facts.user, self.facts.home)

    @property
    def project(self) -> str:
        return self.dest.project(self.facts.user, self.facts.home)

    def prepare(self) -> tuple[bool, str | None]:
        """Make the repository there if new; whether it was, and the run id of a submit running there.
        :class:`ForeignProject` where the folder holds another project: nothing sent."""
        ours = self.dest.identity
        done = self.conn.run(command(PREPARE, self.folder, self.project, " ".join(ours), setup=self.dest.setup))
        if done.returncode != 0:
            raise RemoteError(f"cannot make the project folder {self.folder} on {self.dest.host}", _said(done))
        found = {words[0]: words[1:] for words in markers(done.stdout)}
        self.check_project(" ".join(found.get("project", [])).split())
        busy = found.get("busy")
        return "created" in found, (busy[0] if busy else "") or (None if busy is None else "?")

    def check_folder(self) -> None:
        """:class:`ForeignProject` where the folder there holds another project: for the commands that
        run there without a sync first (status, logs, cancel, show), which would read its ledger."""
        done = self.conn.run(command('cat -- "$1" 2>/dev/null; exit 0', f"{self.folder}/{PROJECT_FILE}"))
        self.check_project(done.stdout.split())

    def check_project(self, theirs: Sequence[str]) -> None:
        """:class:`ForeignProject` where ``theirs`` (the identity the folder there recorded) shares no root
        commit with this repository's: another project's clone by the same folder name was sent there."""
        ours = self.dest.identity
        if not ours or not theirs or set(ours) & set(theirs):
            return
        repo = self.dest.repo
        raise ForeignProject(
            f"{self.dest.host}:{self.folder} holds another project (first commit {theirs[0][:12]}; this repository's is "
            f"{ours[0][:12]}): a clone of another project by the same folder name, {repo.name!r}, was sent there; nothing was sent",
            hints=[
                f"rename this clone's folder ({repo}): the folder there is <login.root>/<the clone's folder name>",
                f"or set login.root in the profile {self.dest.cluster!r} to a folder for this project",
            ],
        )

    def run(
        self, argv: Sequence[str], out: Callable[[bytes], None], say: Callable[[str], None], now: Callable[[], float] = time.time
    ) -> int:
        """``orchestrator ARGV`` in the project folder there, detached, followed until it ends; its exit status."""
        run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now())) + f"-{argv[0]}-{int(now() * 1000) % 100000:05d}"
        kind = "submit" if argv[0] == "submit" else "other"
        follower = Follower(self, out, say, argv)
        return follower.follow(command(RUN, self.project, run_id, kind, *argv, setup=self.dest.setup), run_id)

    def attach(self, run_id: str, out: Callable[[bytes], None], say: Callable[[str], None]) -> int:
        """Follow run ``run_id`` there ("": the newest) from its start."""
        follower = Follower(self, out, say, ())
        return follower.follow(command(FOLLOW, self.project, run_id, "0"), run_id or None)

    def follow_command(self, run_id: str | None) -> str:
        return f"orchestrator remote attach {run_id}" if run_id else "orchestrator remote attach"


@dataclass
class Follower:
    """Streams a remote run's log, reconnecting where the connection drops."""

    session: Session
    out: Callable[[bytes], None]
    say: Callable[[str], None]
    argv: Sequence[str]
    offset: int = 0
    run_id: str | None = None

    def chunk(self, data: bytes) -> None:
        self.offset += len(data)
        self.out(data)

    def follow(self, first: str, run_id: str | None) -> int:
        s, conn = self.session, self.session.conn
        line, attempt = first, 0
        try:
            while True:
                done = conn.stream(line, self.chunk)
                said = {words[0]: words[1:] for words in markers(done.stderr)}
                if "started" in said or "attached" in said:
                    self.run_id = (said.get("started") or said["attached"])[0]
                    if "attached" in said:
                        rest = " ".join(said["attached"][1:])
                        self.say(f"a submit of this project is still running on {s.dest.host} ({rest or self.run_id}): following it")
                if "exit" in said:
                    return int(said["exit"][0])
                if "lost" in said:
                    raise RemoteError(f"the remote command ended without an exit status (killed there?); its log: {self.log()}")
                if "no-run" in said:
                    raise RemoteError(f"no remote run {said['no-run'][0] if said['no-run'] else run_id!r} in {s.project} on {s.dest.host}")
                if "no-folder" in said:
                    raise RemoteError(
                        f"the project folder {s.project} is not on {s.dest.host}", hints=["send it: orchestrator remote sync"]
                    )
                if "setup-failed" in said:
                    raise RemoteError(f"a line of login.setup failed on {s.dest.host}: {' '.join(said['setup-failed'])}")
                if done.returncode != 255:
                    raise RemoteError(f"the remote command stopped early (exit {done.returncode})", _said(done))
                ssh_said = "\n".join(line for line in done.stderr.splitlines() if not line.startswith(TAG))
                error, again = classify(s.dest.host, ssh_said, connected=True)
                if not again or attempt >= connection.RETRIES:
                    if isinstance(error, ConnectionLost):
                        error.hints = (*error.hints, *self.goes_on())
                    raise error
                conn.backoff(attempt)
                attempt += 1
                self.say(f"the connection to {s.dest.host} dropped; reconnecting (try {attempt} of {connection.RETRIES})")
                follow_id = self.run_id or run_id
                if self.run_id is None and self.argv:  # it may not have started: start it (a submit attaches if it did)
                    line = first
                else:
                    line = command(FOLLOW, s.project, follow_id or "", str(self.offset))
        except KeyboardInterrupt:
            raise Detached(self.goes_on()) from None

    def log(self) -> str:
        """Where the run's log is there: its own folder once the far side has named the run, else
        the pattern of its folders (a run id is a UTC time, the command, a number), the newest."""
        where = f"{self.session.dest.host}:{self.session.project}/{RUNS_DIR}"
        if self.run_id:
            return f"{where}/{self.run_id}/log"
        return f"{where}/*-{self.argv[0] if self.argv else '*'}-*/log, the newest"

    def goes_on(self) -> list[str]:
        what = f"`orchestrator {' '.join(self.argv)}`" if self.argv else "the remote command"
        return [
            f"{what} goes on on {self.session.dest.host} (log: {self.log()})",
            f"follow it again: {self.session.follow_command(self.run_id)} (or `orchestrator status --remote`)",
        ]


class Detached(RemoteError):
    """Ctrl-C stopped the streaming here; the remote command goes on."""

    exit_code = 130

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("stopped following (Ctrl-C); nothing was stopped on the cluster", hints=lines)


class Interrupted(RemoteError):
    """Ctrl-C before the remote command was started; nothing runs there."""

    exit_code = 130


def _said(done) -> list[str]:
    return [line for line in (done.stderr.strip() or done.stdout.strip()).splitlines() if not line.startswith(TAG)][-8:]
