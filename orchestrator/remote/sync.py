"""Sending the workspace's committed state (and, when asked, its uncommitted changes) to the cluster.

The project's folder on the cluster is a git repository. A sync is:

1. here: HEAD, and with ``--with-changes`` one more commit on top of it that holds the
   working tree as it is (tracked changes, deletions and untracked files that are not
   ignored; never dvc.lock or .gitignore, which the cluster keeps its own of: see
   :mod:`checkout`). It is written with a temporary index (``GIT_INDEX_FILE``), so the
   user's index, stash and branches are untouched; the commit is reachable from no branch.
2. ``git push --force`` of both to ``refs/orchestrator/*`` there, through the session's
   ssh master (``core.sshCommand``): only the objects the cluster lacks cross, and no
   branch there is moved, so pushing never conflicts with what is checked out.
3. there: ``orchestrator remote checkout`` (:mod:`checkout`): the commit checked out
   detached, the changes applied on top, outputs, ledger and DVC cache untouched, the
   cluster's dvc.lock entries kept; refused, with nothing changed, when tracked files
   there were changed by hand.

Why git rather than rsync: the cluster gets exactly the committed files (no build
leftovers, no outputs in the way), the transfer is incremental on both sides' objects,
and the cluster's folder can say at any time which commit it ran (``git log -1``),
which the jobs' provenance records.
"""

from __future__ import annotations

import shlex
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.remote.checkout import NOT_MERGED
from orchestrator.remote.session import IN_FOLDER, Session, command
from orchestrator.util.git import Git
from orchestrator.util.git import argv as git_argv
from orchestrator.util.runner import Completed, Runner
from orchestrator.util.ssh import RemoteError

HEAD_REF = "refs/orchestrator/head"
CHANGES_REF = "refs/orchestrator/changes"
# The throwaway commit of uncommitted changes needs an author; it is nobody's work to credit.
_IDENTITY = ("-c", "user.name=orchestrator", "-c", "user.email=orchestrator@localhost")


@dataclass(frozen=True)
class Snapshot:
    head: str
    changes: str | None  # the commit of the uncommitted changes; None: none sent
    left_out: int  # changed or untracked paths not sent (no --with-changes)


def snapshot(repo: Path, runner: Runner, with_changes: bool) -> Snapshot:
    """HEAD and, with ``with_changes``, a commit of the working tree on top of it (pure git, nothing moved)."""
    git = _git(Git(repo, runner))
    head = git("rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
    if head.returncode != 0:
        raise RemoteError(f"{repo} has no commit yet: --remote sends the committed state", hints=["commit the project, then run it again"])
    status = git("status", "--porcelain", "--", ".", *NOT_MERGED).stdout.splitlines()
    if not with_changes or not status:
        return Snapshot(head.stdout.strip(), None, len(status))
    with tempfile.TemporaryDirectory(prefix="orchestrator-index-") as tmp:
        index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git("read-tree", "HEAD", env=index)
        git("add", "-A", "--", ".", *NOT_MERGED, env=index)
        tree = git("write-tree", env=index).stdout.strip()
    if tree == git("rev-parse", "HEAD^{tree}").stdout.strip():
        return Snapshot(head.stdout.strip(), None, 0)
    message = "orchestrator: the workstation's uncommitted changes (sent with --with-changes)"
    changes = git(*_IDENTITY, "commit-tree", tree, "-p", head.stdout.strip(), "-m", message).stdout.strip()
    return Snapshot(head.stdout.strip(), changes, 0)


def push_argv(repo: Path, ssh_command: list[str], host: str, folder: str, snap: Snapshot) -> list[str]:
    """``git push`` of HEAD (and the changes' commit) to the cluster's repository, over the session's ssh."""
    refspecs = [f"+{snap.head}:{HEAD_REF}"]
    if snap.changes:
        refspecs.append(f"+{snap.changes}:{CHANGES_REF}")
    # scp-like host:path (an alias works; no slash before the colon); the path is absolute (session.folder).
    return git_argv(repo, "-c", f"core.sshCommand={shlex.join(ssh_command)}", "push", "--quiet", f"{host}:{folder}", *refspecs)


def sync(
    session: Session, runner: Runner, with_changes: bool, say: Callable[[str], None], prepared: tuple[bool, str | None] | None = None
) -> Snapshot:
    """Send the workspace there and check it out (see the module's docstring); ``prepared``:
    what session.prepare() said, where the caller asked already."""
    dest = session.dest
    snap = snapshot(dest.repo, runner, with_changes)
    if snap.left_out:
        say(f"{snap.left_out} uncommitted change(s) here are not sent (--with-changes sends them)")
    created, busy = prepared or session.prepare()
    if busy is not None:
        raise RemoteError(
            f"a submit of this project is still running on {dest.host} (run {busy}): its checkout is left as it is",
            hints=["follow it: orchestrator remote attach", "or wait for it to end, then sync again"],
        )
    if created:
        say(f"made {session.folder} on {dest.host} (a git repository)")
    done = runner.run(push_argv(dest.repo, session.conn.base(), dest.host, session.folder, snap), timeout=3600)
    if done.returncode != 0:
        raise RemoteError(
            f"git push to {dest.host}:{session.folder} failed (exit {done.returncode})", done.stderr.strip().splitlines()[-8:]
        )
    done = session.conn.run(command(IN_FOLDER, session.folder, *checkout_argv(snap), setup=dest.setup), retry=False)
    for line in done.stdout.splitlines():
        say(line)
    if done.returncode != 0:
        lines = [line.removeprefix("error: ") for line in done.stderr.strip().splitlines() if line.strip()]
        raise RemoteError(f"on {dest.host}: {lines[0] if lines else f'the checkout failed (exit {done.returncode})'}", hints=lines[1:])
    return snap


def checkout_argv(snap: Snapshot) -> list[str]:
    """The checkout there (:mod:`checkout`): the commits as values that no parser can take for options."""
    return ["orchestrator", "remote", "checkout", *([f"--changes={snap.changes}"] if snap.changes else []), "--", snap.head]


def _git(repository: Git):
    def git(*args: str, check: bool = True, env: Mapping[str, str] | None = None) -> Completed:
        done = repository.run(*args, env=env)
        return _check(done) if check else done

    return git


def _check(done: Completed) -> Completed:
    if done.returncode != 0:
        raise RemoteError(f"`{shlex.join(done.argv)}` failed (exit {done.returncode})", done.stderr.strip().splitlines()[-8:])
    return done
