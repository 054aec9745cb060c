"""`orchestrator profile-diff`: two profiled runs' operators, baseline vs exp (the arithmetic is in :mod:`opcompare`)."""

from __future__ import annotations

import json
import posixpath
import tempfile
from pathlib import Path

import click

from orchestrator.analysis import opdiff
from orchestrator.cli.options import project_option


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
        runs = [opdiff.load(_at_revision(str(arg), project, Path(scratch) / str(n))) for n, arg in enumerate((baseline, exp))]
    comparison = opdiff.compare(*runs, top)
    click.echo(json.dumps(comparison.to_json(), indent=2) if as_json else opdiff.render_text(comparison))


def _at_revision(arg: str, project: Path, scratch: Path) -> Path:
    """``arg`` itself when it is there, else REV:PATH's operators.json read from the revision into ``scratch``."""
    rev, sep, path = arg.partition(":")
    if Path(arg).exists() or not sep or not rev or not path:
        return Path(arg)
    from orchestrator.analysis.revisions import Revision

    wanted = path if path.endswith(".json") else posixpath.join(path.rstrip("/"), opdiff.OPERATORS_FILE.as_posix())
    Revision(project, rev).read_files([wanted], scratch)
    found = scratch / wanted
    if not found.is_file():
        raise opdiff.ProfileDataError(f"revision {rev} has no {wanted}", hints=["profile a run with --profile-steps START:COUNT"])
    return found
