"""`orchestrator remote`: the project on the cluster's login node (sync, attach, shell), and
the `--remote` of the job commands (see orchestrator.remote)."""

from __future__ import annotations

import contextlib
import re
import shlex
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import click

from orchestrator.cli.options import WholeGroup, cluster_option, project_option
from orchestrator.errors import OrchestratorError

# The ids session.run gives the runs there (the start time, the command, a number).
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
REMOTE_HELP = "Run it on the cluster's login node over ssh (the profile's login.host, or params.yaml's orchestrator.login_host)."


def remote_option(f):
    return click.option("--remote", "-r", is_flag=True, help=REMOTE_HELP)(f)


def say_line(line: str) -> None:
    click.echo(f"orchestrator: {line}", err=True)


def open_session(project: Path, cluster: str | None, checked: bool = True):
    from orchestrator.remote import destination
    from orchestrator.remote.connection import Connection
    from orchestrator.remote.session import Session
    from orchestrator.util.runner import SubprocessRunner

    runner = SubprocessRunner()
    dest = destination.resolve(project, cluster, runner)
    return Session.open(Connection.to(dest.host, runner), dest, install_command(project, cluster), checked), runner


def install_command(project: Path, cluster: str | None) -> str:
    """``orchestrator remote install`` with the --cluster and --project of this command: the one to copy."""
    words = ["orchestrator", "remote", "install"]
    if cluster:
        words.append(f"--cluster={cluster}")
    if project.resolve() != Path.cwd().resolve():
        words.append(f"--project={project}")
    return shlex.join(words)


def stream_out(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def forwarded(command: str, options: Sequence[str], targets: Sequence[str]) -> list[str]:
    """``orchestrator COMMAND`` as the login node gets it: the targets after ``--``, so that no
    target (a stage named ``--project=X``) becomes an option there. Options carry their value in
    the same word (``--cluster=NAME``), so that a value never becomes an option either."""
    return [command, *options, *(["--", *targets] if targets else [])]


def run_remote(project: Path, cluster: str | None, argv: Sequence[str], sync: bool = False, with_changes: bool = False) -> None:
    """``orchestrator ARGV`` on the login node in the project's folder there (sent first when
    ``sync``, behind a submit of the project still running there), its output streamed here;
    exits with its exit status."""
    from orchestrator.remote.session import Detached, Follower, Interrupted

    session, runner = open_session(project, cluster)
    try:
        send(session, runner, sync, with_changes, queue=True)
    except KeyboardInterrupt:
        raise Interrupted(f"stopped (Ctrl-C) before `orchestrator {argv[0]}` started on {session.dest.host}: nothing runs there") from None
    try:
        say_line(f"running `orchestrator {shlex.join(argv)}` on {session.dest.host} in {session.project}")
        code = session.run(list(argv), stream_out, say_line)
    except KeyboardInterrupt:  # before its output streamed: it may have started there, and then goes on
        raise Detached(Follower(session, stream_out, say_line, argv).goes_on()) from None
    if code:
        sys.exit(code)


def send(session, runner, sync: bool, with_changes: bool = False, busy: str = "", queue: bool = False) -> None:
    """Before a command runs there: the project sent (``sync``); without ``sync``, the folder there
    checked to hold this project.

    While a submit of the project still runs there, its checkout is not changed under it:
    with ``queue``, that submit is followed to its end and this one sent after it (a rerun
    after Ctrl-C, or a submit of the next change while the last one is still submitting,
    waits its turn rather than refusing or being dropped); else nothing is sent and ``busy``
    says what then happens."""
    from orchestrator.remote import sync as syncing
    from orchestrator.remote.session import Detached

    if not sync:
        session.check_folder()  # another project's folder of the same name: not its ledger, logs or jobs
        return
    prepared = session.prepare()
    while queue and prepared[1] is not None:
        running = prepared[1] if RUN_ID.fullmatch(prepared[1]) else ""
        say_line(
            f"a submit of this project is still running on {session.dest.host} ({running or 'its run id unknown'}): "
            "following it to its end; this one is sent and runs after it"
        )
        try:
            session.attach(running, stream_out, say_line)
        except Detached as exc:
            exc.hints = (*exc.hints, "this command was not sent: run it again (it waits for that one again)")
            raise
        prepared = session.prepare()
    if prepared[1] is None:
        syncing.sync(session, runner, with_changes, say_line, prepared)
    else:  # session.RUN attaches to it; its checkout is left as it is
        say_line(f"a submit of this project is still running on {session.dest.host}: nothing sent{busy}")


@contextlib.contextmanager
def hinting(project: Path, cluster: str | None) -> Iterator[None]:
    """A user error of a job command run here gets the --remote hint where Slurm is missing."""
    try:
        yield
    except OrchestratorError as exc:
        if found := hint(project, cluster):
            exc.hints = (*exc.hints, found)
        raise


def hint(project: Path, cluster: str | None) -> str | None:
    """Where Slurm is missing here: the --remote hint, when the profile names a login node."""
    import shutil

    if shutil.which("sbatch") is not None:
        return None
    try:
        from orchestrator.config import params, profile

        prm = params.load(project)
        name = prm.named_cluster(cluster)
        if name is None:
            return None
        host = prm.for_cluster(name).settings.login_host or profile.load(name).profile.login.host
    except Exception:  # noqa: BLE001 - a hint must never hide the error it is added to
        return None
    return f"this machine has no Slurm; to run it on {host}, the login node of {name}, from here: add --remote" if host else None


@click.group(cls=WholeGroup)
def remote() -> None:
    """The project on the cluster's login node: send it, follow a command there, open a shell there.

    The login node is the profile's login.host (params.yaml's orchestrator.login_host
    overrides it); the project's folder there is <login.root>/<this repository's folder
    name>. `submit --remote` (and status, logs, cancel, show) use the same.
    """


@remote.command("sync")
@cluster_option()
@project_option
@click.option("--with-changes", is_flag=True, help="Also send the uncommitted changes (tracked and untracked files not ignored).")
def sync_command(cluster: str | None, project: Path, with_changes: bool) -> None:
    """Send the committed state of the project to its folder on the login node and check it out there.

    Outputs, the ledger and the DVC cache there stay; the cluster's dvc.lock entries of
    its runs are kept. Refused, with nothing changed, when tracked files were changed there.
    """
    from orchestrator.remote import sync as syncing

    session, runner = open_session(project, cluster)
    snap = syncing.sync(session, runner, with_changes, say_line)
    click.echo(f"{session.dest.host}:{session.folder} at {snap.head[:12]}" + (" with the uncommitted changes" if snap.changes else ""))


@remote.command()
@click.argument("run_id", default="")
@cluster_option()
@project_option
def attach(run_id: str, cluster: str | None, project: Path) -> None:
    """Follow a command running on the login node (default: the newest) from the start of its output."""
    if run_id and not RUN_ID.fullmatch(run_id):  # it names a folder there: never one outside the runs' folder
        raise OrchestratorError(
            f"{run_id!r} is not a run id: a run id is letters, digits, '.', '_' and '-' (e.g. 20250101T120000-submit-01234)",
            hints=["the newest run: orchestrator remote attach (no RUN_ID)"],
        )
    session, _ = open_session(project, cluster)
    code = session.attach(run_id, stream_out, say_line)
    if code:
        sys.exit(code)


@remote.command()
@cluster_option()
@project_option
def shell(cluster: str | None, project: Path) -> None:
    """An interactive shell on the login node, in the project's folder there (over the session's ssh master)."""
    import os

    from orchestrator.remote.session import command

    session, _ = open_session(project, cluster)
    script = 'n=$1; shift; while [ "$n" -gt 0 ]; do eval "$1"; shift; n=$((n-1)); done; cd -- "$1" && exec bash -l'
    argv = [*session.conn.base(), "-t", "--", session.dest.host, command(script, session.project, setup=session.dest.setup)]
    os.execvp(argv[0], argv)


@remote.command()
@cluster_option()
@project_option
@click.option(
    "--wheels",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Send the wheels in this folder along: pip there looks among them (--find-links) as well as on the login "
    "node's package index, so DIR needs only what that index lacks (with --no-index, everything). Fill it here: "
    "pip download -d DIR WHEEL (this version's wheel, or . in a clone; --python-version, --platform and "
    "--only-binary :all: for the login node's Python where they differ). This version's wheel is sent in any case: "
    "taken from DIR, else built from the source tree, else the installed one.",
)
@click.option(
    "--no-index",
    is_flag=True,
    help="Install from the wheels sent only, never the login node's package index (pip --no-index): for a login node "
    "without the internet, with --wheels DIR holding the dependencies (or --system-site-packages where its Python has them).",
)
@click.option("--python", "python", default="python3", show_default=True, help="The Python there that makes the venv (3.10 or newer).")
@click.option(
    "--system-site-packages", is_flag=True, help="Let the venv see that Python's own packages (e.g. a site's Python module's numpy)."
)
def install(cluster: str | None, project: Path, wheels: Path | None, no_index: bool, python: str, system_site_packages: bool) -> None:
    """Install this version of the orchestrator, with DVC, on the cluster's login node: a venv there that --remote then uses.

    The venv is <login.root>/.orchestrator/venv-VERSION. This version's wheel is sent
    over ssh: from --wheels DIR, else built here from the source tree this orchestrator
    runs from (a clone), else the wheel it was installed from (or its installed files,
    checked against pip's RECORD, packed into one). The dependencies come from the
    login node's package index and the wheels of --wheels DIR; with --no-index, from
    the wheels sent only. Run again to repair a venv; a new version gets a venv of its own.
    """
    from orchestrator.remote import install as installing

    session, runner = open_session(project, cluster, checked=False)
    venv = installing.install(session, runner, wheels, python, system_site_packages, say_line, no_index=no_index)
    click.echo(f"{session.dest.host}:{venv} runs orchestrator {installing.__version__}; --remote uses it from now on")


@remote.command(hidden=True)
@click.argument("commit")
@click.option("--changes", default=None, help="The commit of the workstation's uncommitted changes, on top of COMMIT.")
def checkout(commit: str, changes: str | None) -> None:
    """(On the login node, called by a sync) check out COMMIT here, keeping outputs and the cluster's dvc.lock entries."""
    from orchestrator.remote import checkout as co
    from orchestrator.util.runner import SubprocessRunner

    outcome = co.checkout(Path.cwd(), commit, changes, SubprocessRunner())
    for line in co.describe(outcome):
        click.echo(line)


@remote.command(hidden=True)
@click.argument("name")
@click.argument("stages", nargs=-1, required=True)
def push(name: str, stages: tuple[str, ...]) -> None:
    """(On the login node, called by a fetch) push STAGES' cached outs to the DVC remote NAME."""
    from orchestrator.remote import shared

    count, error = shared.push(Path.cwd(), name, stages)
    click.echo(f"{count} object(s) pushed to the DVC remote {name!r}")
    if error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)


@click.command()
@click.argument("targets", nargs=-1)
@cluster_option()
@project_option
def fetch(targets: tuple[str, ...], cluster: str | None, project: Path) -> None:
    """Bring the finished items' outputs and dvc.lock entries from the cluster's project folder here.

    TARGETS: stages (NAME for all items of a matrix, NAME@ITEM for one); default: every
    stage the cluster's dvc.lock has. Where the project's committed DVC config names a
    default remote (`dvc remote default`), cached outs go through it (pushed there, pulled
    here); the rest (`cache: false` outs such as metrics), or everything without one, by
    rsync over the session's ssh. Only the outs this side's dvc.yaml declares for the stage
    are placed (never under .git/, .dvc/, .orchestrator/, nor the pipeline's own files), as
    regular files with the mode your umask gives, each checked against the md5 that dvc.lock
    there records; a stage with an out missing, not matching or not allowed is refused whole,
    its entry not written, exit 1. Then `dvc metrics show`, `dvc plots show` and
    `orchestrator report` work here.
    """
    from orchestrator.remote import fetch as fetching
    from orchestrator.remote.session import IN_FOLDER, PROJECT_FILE, TAG, command, markers
    from orchestrator.util.runner import Completed

    session, runner = open_session(project, cluster)
    where = f"{session.dest.host}:{session.project}"
    # the project the folder there holds (session.PREPARE records it) on stderr, then the lock on stdout
    script = (
        'if [ -s "$2" ]; then printf "%s project %s\\n" "$3" "$(cat "$2")" >&2; fi; '
        'cd -- "$1" 2>/dev/null || exit 97; [ -f dvc.lock ] || exit 98; head -c "$4" dvc.lock'
    )
    # One byte over the cap, so that a lock over it is told from one just under (and refused unread).
    cap = str(fetching.trust.MAX_LOCK_BYTES + 1)
    done = session.conn.run(command(script, session.project, f"{session.folder}/{PROJECT_FILE}", TAG, cap))
    said = {words[0]: words[1:] for words in markers(done.stderr)}
    session.check_project(" ".join(said.get("project", [])).split())  # another project's lock: nothing of it fetched
    if done.returncode in (97, 98):
        what = "no project folder" if done.returncode == 97 else "no dvc.lock in the project folder"
        raise fetching.FetchError(
            f"nothing to fetch: {what} at {where} (nothing synced or finished there yet)",
            hints=["send the project and run it there: orchestrator submit --remote", "what runs there: orchestrator status --remote"],
        )
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if not line.startswith(TAG)]
        raise fetching.FetchError(f"cannot read {where}/dvc.lock (exit {done.returncode})", lines[-6:])
    copy = fetching.rsync_copier(session.conn.base(), session.dest.host, session.project, runner)

    def push_there(remote: str, stages) -> Completed:
        argv = ["orchestrator", "remote", "push", "--", remote, *stages]
        return session.conn.run(command(IN_FOLDER, session.project, *argv, setup=session.dest.setup), retry=False)

    results = fetching.fetch(project, done.stdout, where, targets, _stage_names(project), copy, click.echo, push_there)
    if any(r.refused for r in results):  # what the cluster sent was not taken: say so in the exit status too
        sys.exit(1)


def _stage_names(project: Path) -> list[str]:
    """The stage names this project's dvc.yaml defines (a matrix's or foreach's name once)."""
    import yaml

    try:
        data = yaml.safe_load((project / "dvc.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return []
    stages = data.get("stages") if isinstance(data, dict) else None
    return list(stages) if isinstance(stages, dict) else []
