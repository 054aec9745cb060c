"""`orchestrator profile-diff`: two profiled runs' operators, baseline vs exp (the arithmetic: :mod:`~orchestrator.analysis.opdiff`)."""

from __future__ import annotations

import json
import os
import posixpath
import tempfile
from pathlib import Path

import click

from orchestrator.analysis import opdiff
from orchestrator.cli.options import file_error, project_option


@click.command("profile-diff")
@click.argument("baseline", type=click.Path(path_type=Path))
@click.argument("exp", type=click.Path(path_type=Path))
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True, help="How many operators to show.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@project_option
def profile_diff(baseline: Path, exp: Path, top: int, as_json: bool, project: Path) -> None:
    """Compare the profiled operators of two runs: calls and host time per step, largest change first.

    BASELINE and EXP are run output folders (each with profile/operators.json, from
    a run with --profile-steps START:COUNT) or the operators.json files themselves;
    REV:PATH reads PATH at a revision of the project (a commit, branch, tag or DVC
    experiment: a run on another cluster, kept as its experiment), as `git show` does.
    """
    with tempfile.TemporaryDirectory(prefix="orchestrator-profile-diff-") as scratch:
        base_run, exp_run = [opdiff.load(_at_revision(str(arg), project, Path(scratch) / str(n))) for n, arg in enumerate((baseline, exp))]
    comparison = opdiff.compare(base_run, exp_run, top)
    click.echo(json.dumps(comparison.to_json(), indent=2) if as_json else opdiff.render_text(comparison))


def _at_revision(arg: str, project: Path, scratch: Path) -> Path:
    """``arg`` itself when it is there, else REV:PATH's operators.json read from the revision into ``scratch``."""
    rev, sep, path = arg.partition(":")
    if _is_there(arg) or not sep or not rev or not path:
        return Path(arg)
    wanted = _in_project(arg, rev, path)
    if not os.path.realpath(scratch / wanted).startswith(os.path.realpath(scratch) + os.sep):
        raise _outside(arg, path)  # _in_project keeps it inside; this holds it to that where the file is written
    from orchestrator.analysis.revisions import Revision

    try:
        Revision(project, rev).read_files([wanted], scratch)
    except OSError as exc:
        raise opdiff.ProfileDataError(f"{arg!r}: cannot read {wanted} of revision {rev!r}: {file_error(exc)}") from None
    found = scratch / wanted
    if not found.is_file():
        raise opdiff.ProfileDataError(f"revision {rev} has no {wanted}", hints=["profile a run with --profile-steps START:COUNT"])
    return found


def _is_there(arg: str) -> bool:
    """Whether ``arg`` is a file or folder here; a name the system refuses (too long, a NUL) is not one."""
    try:
        return Path(arg).exists()
    except (OSError, ValueError):
        return False


def _in_project(arg: str, rev: str, path: str) -> str:
    """REV:PATH's file as a path from the project's folder: the revision's file goes to the same
    path under a scratch folder, so a PATH that leaves the project would write outside it."""
    if rev.startswith("-"):
        raise opdiff.ProfileDataError(
            f"{arg!r}: {rev!r} is not a revision (it starts with '-')", hints=["name a commit, branch, tag or DVC experiment"]
        )
    if "\0" in path or posixpath.isabs(path):
        raise _outside(arg, path)
    wanted = path if path.endswith(".json") else posixpath.join(path.rstrip("/"), opdiff.OPERATORS_FILE.as_posix())
    wanted = posixpath.normpath(wanted)
    if wanted == ".." or wanted.startswith("../"):
        raise _outside(arg, path)
    return wanted


def _outside(arg: str, path: str) -> opdiff.ProfileDataError:
    return opdiff.ProfileDataError(
        f"{arg!r}: PATH {path!r} is not a path inside the project",
        hints=["REV:PATH takes PATH from the project's folder, without a leading '/' or a '..' that leaves it (e.g. HEAD:results/run-0)"],
    )
