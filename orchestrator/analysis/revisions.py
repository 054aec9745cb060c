"""Runs of another revision: a git commit, branch or tag, or a DVC experiment, read from
git and DVC's cache without checking anything out.

One matrix run on two clusters keeps both results the way DVC keeps any two variants:
each in its own commit or experiment (``dvc exp run -n on-lumi -S orchestrator.cluster=lumi``).
The report reads a revision's pipeline (dvc.yaml, params.yaml, the profile file its params
name) and only the small files of its runs (the metrics files dvc.yaml declares,
provenance.json, the per-step curves) into a folder of its own, which then reads like a project: checkpoints and other
large outputs are never fetched.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.analysis.runs import CURVES_DIR, Expected
from orchestrator.config import params
from orchestrator.errors import ConfigError, PipelineError
from orchestrator.pipeline import stages

WORKSPACE = "workspace"  # the name that stands for the files as they are, as in `dvc exp show`
PIPELINE_FILES = (stages.PIPELINE_FILE, "params.yaml")


class Revision:
    """A revision of ``project`` as DVC's file system sees it (git's files and DVC's outputs)."""

    def __init__(self, project: Path, name: str):
        self.project, self.name = project, name
        self.fs = _file_system(project, name)

    def read_pipeline(self, into: Path) -> None:
        """dvc.yaml and params.yaml of the revision into ``into``, made a DVC project (no git)
        so that the pipeline resolves there as here; with the profile file its params name."""
        from dvc.repo import Repo

        into.mkdir(parents=True, exist_ok=True)
        for name in PIPELINE_FILES:
            if self._isfile(name):
                self.fs.get_file(name, str(into / name))
        if not (into / stages.PIPELINE_FILE).is_file():
            raise PipelineError(f"revision {self.name!r} has no {stages.PIPELINE_FILE}", hints=["name a revision of this pipeline"])
        cluster = _cluster_file(into)
        if cluster and self._isfile(cluster):
            (into / cluster).parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(cluster, str(into / cluster))
        if not (into / ".dvc").is_dir():
            Repo.init(str(into), no_scm=True).close()

    def read_runs(self, runs: Iterable[Expected], into: Path) -> None:
        """Each run's metrics files, and the provenance and curves in its folder, that the revision has."""
        for run in runs:
            self.read_files([*run.files, posixpath.join(run.directory, stages.PROVENANCE_FILE)], into)
            curves = posixpath.join(run.directory, CURVES_DIR)
            if self.fs.isdir(curves):
                self.read_files([path for path in self.fs.find(curves) if path.endswith(".tsv")], into)

    def read_files(self, paths: Iterable[str], into: Path) -> None:
        """These files of the revision (paths from the project's root) to the same paths under ``into``; those it lacks are skipped."""
        for path in paths:
            self._get(path, into)

    def _isfile(self, path: str) -> bool:
        """Whether the revision has the file ``path``. DVC's own ``isfile`` answers False for
        every path of a revision whose pipeline it cannot read (a broken params.yaml, a dvc.lock
        that is not a mapping), which would read as a missing file: that is said instead."""
        from dvc.exceptions import DvcException

        try:
            return self.fs.info(path)["type"] == "file"
        except (FileNotFoundError, NotADirectoryError):
            return False
        except DvcException as exc:
            raise PipelineError(
                f"DVC cannot read the pipeline of revision {self.name!r}",
                stages.dvc_problems(exc, Path()),  # a path as the revision names it, not this workspace's file
                hints=["fix it in a new commit, or name another revision"],
            ) from exc

    def _get(self, path: str, into: Path) -> None:
        try:
            if not self._isfile(path):
                return
            (into / path).parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(path, str(into / path))
        except FileNotFoundError:
            return  # listed by the revision's dvc.lock, but not in this cache: the run reads as missing


def _file_system(project: Path, name: str) -> Any:
    """DVC's file system at revision ``name``: a git revision, else an experiment's name."""
    from dvc.api import DVCFileSystem
    from dvc.repo import Repo
    from dvc.repo.experiments.utils import resolve_name
    from dvc.scm import RevError, SCMError
    from scmrepo.exceptions import RevError as GitRevError

    try:
        with Repo(str(project)) as repo:
            try:
                sha = repo.scm.resolve_rev(name)
                rev = name
                _require_commit(project, name, sha)
            except (RevError, GitRevError):
                found = resolve_name(repo.scm, [name]).get(name)
                if found is None:
                    raise PipelineError(
                        f"revision {name!r} is neither a git revision nor a DVC experiment of {project.resolve()}",
                        [f"experiments: {', '.join(_experiments(repo)) or 'none'}"],
                        hints=[f"name a commit, branch, tag or experiment (dvc exp list), or {WORKSPACE!r}"],
                    ) from None
                rev = str(found)
    except SCMError as exc:
        raise PipelineError(f"cannot read revision {name!r}: {project} is not a git repository", hints=["git init; dvc init"]) from exc
    return DVCFileSystem(repo=str(project), rev=rev)


def _require_commit(project: Path, name: str, sha: str) -> None:
    """PipelineError unless ``sha`` (``name`` resolved) is a commit: git resolves ``HEAD:dvc.yaml``
    to a file and ``HEAD^{tree}`` to a folder, neither of which is a revision of the project."""
    from orchestrator.util.git import Git
    from orchestrator.util.runner import SubprocessRunner

    kind = (Git(project, SubprocessRunner()).output("cat-file", "-t", sha, timeout=60) or "").strip()
    if kind and kind != "commit":
        what = {"blob": "a file", "tree": "a folder"}.get(kind, f"a git {kind}")
        raise PipelineError(
            f"revision {name!r} names {what} in git, not a commit", hints=[f"name a commit, branch, tag or experiment, or {WORKSPACE!r}"]
        )


def _experiments(repo: Any) -> list[str]:
    try:
        return sorted({exp for exps in repo.experiments.ls(all_commits=True).values() for exp, _ in exps})[:20]
    except Exception:  # noqa: BLE001 - only a hint in an error message: never its own error
        return []


def _cluster_file(root: Path) -> str | None:
    """The profile file the revision's params.yaml names as ``orchestrator.cluster``, if it names a relative path."""
    try:
        cluster = params.load(root).settings.cluster
    except ConfigError:  # the pipeline's own reading of the file reports it
        return None
    if isinstance(cluster, str) and cluster.endswith((".yaml", ".yml")) and not posixpath.isabs(cluster) and ".." not in cluster:
        return cluster
    return None
