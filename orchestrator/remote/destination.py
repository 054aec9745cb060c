"""Where a project goes on the cluster: the login node and the folder there.

The login node is params.yaml's ``orchestrator.login_host`` (a user's own ssh alias;
``clusters.NAME.orchestrator.login_host`` per profile), else the profile's ``login.host``.
The folder is ``<login.root>/<the repository's folder name>``: one folder per project
(per clone name) and user, reused by every later call, so the ledger, outputs and DVC
cache there persist between submits. ``${SLURM_JOB_ACCOUNT}`` in ``login.root`` is
params.yaml's account; ``${USER}`` and ``${HOME}`` are the remote user's, asked over ssh
(an alias may log in as another user than this one). A relative root is under the remote home.

One folder per clone NAME: two different projects whose clones share a folder name would
share it, so the folder records the identity of the project it holds (:attr:`Destination.identity`,
the repository's root commits, which every clone and every later commit of a project keep)
on its first sync, and a sync from a repository of another identity is refused there
(:meth:`session.Session.prepare`).

This side's version of the orchestrator there: a venv in ``<login.root>/.orchestrator/``
(:meth:`Destination.venv`, made by ``orchestrator remote install``), else the login shell's own.

The DVC project may be a folder inside the git repository: the whole repository is sent,
and the commands run in the same folder inside it there.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import params, profile
from orchestrator.util import patterns
from orchestrator.util.git import Git
from orchestrator.util.runner import Runner
from orchestrator.util.ssh import RemoteError


@dataclass(frozen=True)
class Destination:
    host: str
    cluster: str  # the profile's name or path, for messages
    root: str  # login.root, the account filled in
    repo: Path  # the workstation's repository (its top folder)
    prefix: str  # the project's folder inside it, "" or "sub/dir"
    setup: tuple[str, ...]
    identity: tuple[str, ...] = ()  # the repository's root commit(s); (): none yet (no commit)

    def folder(self, user: str, home: str) -> str:
        """The repository's folder on the cluster, with the remote user's ${USER} and ${HOME}."""
        values = {"USER": user, "HOME": home}
        root = patterns.RUNTIME_REF.sub(lambda m: values[m.group(1)], self.root)
        if root == "~" or root.startswith("~/"):
            root = home + root[1:]
        return posixpath.normpath(posixpath.join(home, root, self.repo.name))

    def venv(self, user: str, home: str) -> str:
        """Where ``orchestrator remote install`` puts this side's version: ``<login.root>/.orchestrator/venv-VERSION``.
        Beside the projects, not in one: shared by the projects there that run the same version (DVC and its
        dependencies are hundreds of MB), never inside a git working tree that DVC and git look through; one
        per version, so a project moved to a new version leaves the others' venv as it is."""
        from orchestrator import __version__

        return posixpath.join(posixpath.dirname(self.folder(user, home)), ".orchestrator", f"venv-{__version__}")

    def project(self, user: str, home: str) -> str:
        folder = self.folder(user, home)
        return posixpath.join(folder, self.prefix) if self.prefix else folder


def resolve(project: Path, cluster: str | None, runner: Runner) -> Destination:
    """The destination of ``project`` (its params.yaml and profile; the git repository it is in)."""
    prm = params.load(project)
    name = named_cluster(prm, cluster)
    prm = prm.for_cluster(name)
    loaded = profile.load(name)
    login = loaded.profile.login
    host = prm.settings.login_host or login.host
    if not host:
        raise RemoteError(
            f"profile {loaded.name!r} names no login node to run on",
            hints=[
                "set orchestrator.login_host in params.yaml (an alias of your ~/.ssh/config, or [user@]host)",
                "or give the profile a login section: login: {host: HOST, root: FOLDER}",
            ],
        )
    root = login.root
    if "${SLURM_JOB_ACCOUNT}" in root:
        if not prm.settings.account:
            raise RemoteError(
                f"profile {loaded.name!r}'s login.root {root!r} needs the account: params.yaml's orchestrator.account is not set"
            )
        root = root.replace("${SLURM_JOB_ACCOUNT}", prm.settings.account)
    top, prefix = repository(project, runner)
    return Destination(host, loaded.name, root, top, prefix, login.setup, identity(top, runner))


def named_cluster(prm: params.Params, cluster: str | None, flag: str = "--remote") -> str:
    """The profile a command run from here on the cluster (``flag``) uses: ``cluster``, else params.yaml's;
    one message where neither names one."""
    name = prm.named_cluster(cluster)
    if name is None:
        raise RemoteError(
            f"{flag} needs to know the cluster: params.yaml's orchestrator.cluster is "
            + ("'auto'" if prm.settings.cluster == "auto" else "not set"),
            hints=["set orchestrator.cluster in params.yaml (a built-in profile such as lumi, or a profile file), or pass --cluster"],
        )
    return name


def repository(project: Path, runner: Runner) -> tuple[Path, str]:
    """The git repository ``project`` is in (its top folder) and the project's folder inside it."""
    try:
        done = Git(project, runner).run("rev-parse", "--show-toplevel", "--show-prefix", timeout=60)
    except FileNotFoundError:
        raise RemoteError("git is not installed here: --remote sends the project's commits to the cluster with git") from None
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not lines:
        raise RemoteError(
            f"{project.resolve()} is not in a git repository: --remote sends the committed state of the project",
            hints=["git init, add and commit the project (dvc.yaml, params.yaml, code), then run it again"],
        )
    prefix = lines[1].strip().rstrip("/") if len(lines) > 1 else ""
    return Path(lines[0].strip()), prefix


_COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


def identity(repo: Path, runner: Runner) -> tuple[str, ...]:
    """The root commit(s) of HEAD's history: what another clone of the same project shares, whatever
    its folder is called, and an unrelated project does not. (): no commit yet."""
    done = Git(repo, runner).run("rev-list", "--max-parents=0", "HEAD", timeout=60)
    if done.returncode != 0:
        return ()
    return tuple(sorted(line.strip() for line in done.stdout.splitlines() if _COMMIT.fullmatch(line.strip())))
