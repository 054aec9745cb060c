"""Provenance: how a result was produced, precisely enough to produce it again.

Taken when a job is submitted (code version, profile and script by hash, the
container image by path and by its file's sha256) and completed when it ends (job
ids, nodes, requeues). It lives in the ledger record and, once the job succeeded,
in ``provenance.json`` beside each of the stage's metrics files where the stage
declares it (``cache: false, persist: true``, as the shipped pipeline and `orchestrator
init --wrap` do), so that it travels with the results in git and DVC experiments.
Where the stage does not declare it, it is kept under the orchestrator's own folder
(``.orchestrator/provenance/<the metrics folder>/``) instead: an undeclared file in the
user's results folder would be an untracked file git lists and DVC does not know.

A run from a workspace with uncommitted changes cannot be re-run from its commit: its
provenance names the changed files and says so instead of giving a re-run command.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections.abc import Collection, Sequence
from pathlib import Path

from orchestrator.analysis import energy, runs
from orchestrator.config.profile_schema import LoadedProfile
from orchestrator.jobs import ledger
from orchestrator.pipeline import stages
from orchestrator.scripts import cluster_checks
from orchestrator.util import files, git
from orchestrator.util.runner import Runner

FILE = stages.PROVENANCE_FILE


def at_submission(
    root: Path,
    runner: Runner,
    loaded: LoadedProfile,
    script: str,
    image_file: str | None = None,
    partition: str | None = None,
    account: str | None = None,
) -> dict:
    """Code version, profile and script (by hash), the partition and account the plan chose, the
    container image: ``image_file`` when params name one of their own (orchestrator.image: x.sif),
    else the profile's."""
    prov: dict = {
        "profile": loaded.name,
        "profile_source": loaded.source,
        "profile_sha256": hashlib.sha256(loaded.text.encode()).hexdigest(),
        **of_job(script, partition),
    }
    image = image_file or loaded.profile.container.image
    if image and loaded.profile.container.runtime:
        prov["image"] = image  # what went into it is pinned by containers/<name>.digest where the stage depends on it
        sha = image_sha256(root, image, account)
        if sha:
            prov["image_sha256"] = sha  # the exact file: the code is the commit's, the rest is this image
    code = git.state(root, runner, untracked=False)
    if code is not None:
        changed = code_changes(root, runner) if code.dirty else []
        prov["git_commit"], prov["git_dirty"] = code.commit, bool(changed)
        if changed:
            more = len(changed) - MAX_DIRTY_FILES
            prov["git_dirty_files"] = changed[:MAX_DIRTY_FILES] + ([f"(+{more} more)"] if more > 0 else [])
    return prov


# How many changed files provenance names: enough to say what differs, not a listing of a whole tree.
MAX_DIRTY_FILES = 20


def code_changes(root: Path, runner: Runner) -> list[str]:
    """The tracked files that differ from HEAD, as git names them, less what running the pipeline
    writes (its declared outputs, dvc.lock, the .gitignore lines DVC adds): a metrics file
    committed after an earlier run and rewritten by the next is a result, not a change to the
    code, and calling it one would make every later run of a committed project "dirty".
    Untracked files are not changes to the code either. Where git cannot say, one entry says so."""
    out = git.Git(root, runner).output("status", "--porcelain=v1", "-z", "--untracked-files=no", "--no-renames", timeout=60)
    if out is None:
        return ["(git status failed)"]
    names = [entry[3:] for entry in out.split("\0") if len(entry) > 3]
    if not names:
        return []
    outputs = stages.run_outputs(root)
    return [name for name in names if not stages.written_by_runs(name, outputs)]


def image_sha256(root: Path, image: str, account: str | None) -> str | None:
    """The sha256 of the image file a job runs in, as it is when the job is submitted; None where
    it cannot be read from here (a reference only the job knows, a file on another machine).

    ``image`` as params or the profile write it (:func:`cluster_checks.image_location`, with the
    job's account). Hashed once per file content (:func:`orchestrator.util.files.cached_sha256`:
    the build, a push or an earlier submission leave it beside the image), so a matrix costs one
    stat a job.
    """
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name known here
        user = os.environ.get("USER", "")
    path = cluster_checks.image_location(image, root, user, account)
    try:
        return files.cached_sha256(path) if path is not None and path.is_file() else None
    except OSError:
        return None


def of_job(script: str, partition: str | None) -> dict:
    """A job's own: its script's hash, and the profile's partition the plan chose (what the site
    bills by, whole nodes or GPUs: the report's cost; a QOS queue such as Frontier's debug by its
    own name, not the Slurm partition it runs in)."""
    return {"script_sha256": script_hash(script), **({"partition": partition} if partition else {})}


def script_hash(script: str) -> str:
    return hashlib.sha256(script.encode()).hexdigest()


def of(record: ledger.Record, history: Sequence[ledger.Record], accounting: energy.Accounting | None = None) -> dict:
    """The full provenance of a finished job: its submission's, plus how it ran, and what the
    cluster's accounting says of it (every run's time and energy) where it was asked."""
    attempts = [r.job_id for r in history if r.fingerprint == record.fingerprint]
    kept = energy.to_record(accounting, record.job_id) if accounting is not None else None
    return {
        "item": record.item,
        **record.provenance,
        "backend": record.backend,
        "job_id": record.job_id,
        "job_ids": attempts,  # every submission with this script and these inputs
        "nodelist": record.nodelist,
        "nodes": record.nodes,
        "requeues": record.requeues,
        "elapsed_s": record.elapsed_s,
        "state": record.state.value,
        "exit_code": record.exit_code,
        "script": record.script,
        "log": record.log,
        "fingerprint": record.fingerprint,
        **rerun(record),
        **({"accounting": kept} if kept else {}),
    }


def rerun(record: ledger.Record) -> dict:
    """How to produce the result again: the command, or, for a run from uncommitted changes, why
    there is none (checking out its commit would run other code than it ran)."""
    prov = record.provenance
    if not prov.get("git_dirty"):
        return {"rerun": f"git checkout {prov.get('git_commit', '<commit>')} && dvc repro {record.item}"}
    changed = prov.get("git_dirty_files")
    which = f" ({', '.join(changed)})" if changed else " (which files was not recorded)"
    return {
        "rerun": None,
        "not_rerunnable": (
            f"submitted from a workspace with uncommitted changes{which} on commit {prov.get('git_commit', '<commit>')}: "
            "that commit does not hold the code this job ran, so it cannot be re-run exactly; "
            "commit the changes before submitting to make a run reproducible"
        ),
    }


def is_provenance(path: str) -> bool:
    """Whether a stage's output is the provenance file the orchestrator writes (declared as an
    output, cache: false, so that git and DVC experiments carry it beside the metrics)."""
    return os.path.basename(path) == FILE


# Where it is kept when the stage does not declare it: the report reads it there too.
kept_path = runs.kept_provenance
find = runs.find_provenance


def write_beside(root: Path, metrics_files: Sequence[str], data: dict, outs: Collection[str]) -> None:
    """Write ``provenance.json`` (atomically) next to each metrics file where the stage declares it
    among ``outs`` (paths as ``metrics_files`` name them), else where :func:`kept_path` says."""
    declared = {posixpath.normpath(o) for o in outs}
    for folder in sorted({os.path.dirname(m) for m in metrics_files}):
        beside = posixpath.join(folder, FILE)
        path = root / beside if posixpath.normpath(beside) in declared else kept_path(root, folder)
        files.atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
