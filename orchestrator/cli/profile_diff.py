"""`orchestrator profile-diff`: two profiled runs' operators, baseline vs exp (the arithmetic is in :mod:`opcompare`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from orchestrator.analysis import opdiff


@click.command("profile-diff")
@click.argument("baseline", type=click.Path(path_type=Path))
@click.argument("exp", type=click.Path(path_type=Path))
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True, help="How many operators to show.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def profile_diff(baseline: Path, exp: Path, top: int, as_json: bool) -> None:
    """Compare the profiled operators of two runs: calls and host time per step, largest change first.

    BASELINE and EXP are run output folders (each with profile/operators.json, from
    a run with --profile-steps START:COUNT) or the operators.json files themselves.
    """
    comparison = opdiff.compare(opdiff.load(baseline), opdiff.load(exp), top)
    click.echo(json.dumps(comparison.to_json(), indent=2) if as_json else opdiff.render_text(comparison))
