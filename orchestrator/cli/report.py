"""`orchestrator report`: the scaling report of a pipeline's runs.

Gathering and arithmetic live in :mod:`orchestrator.analysis.report`, energy in
:mod:`~orchestrator.analysis.energy`, the files in :mod:`~orchestrator.analysis.report_write`; this module reads the project, asks Slurm's
accounting once for every job, and says what it wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli.options import FiniteFloat, cluster_option, project_option

if TYPE_CHECKING:
    from orchestrator.scripts.workspace import Workspace


@click.command("report")
@click.argument("stages", nargs=-1)
@cluster_option("Profile whose params overlay chose the matrix, also used for runs whose provenance names none")
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("reports"),
    show_default=True,
    help="Output folder (relative to the project).",
)
@click.option("--pue", type=FiniteFloat(min=1), default=None, help="Power usage effectiveness [default: each run's profile's site.pue].")
@click.option(
    "--carbon-intensity",
    type=FiniteFloat(min=0),
    default=None,
    help="g CO2e per kWh [default: each run's profile's site.carbon_intensity_g_per_kwh].",
)
@click.option("--accounting/--no-accounting", default=True, show_default=True, help="Ask Slurm's accounting (sacct) for the jobs' energy.")
@click.option(
    "--rev",
    "revs",
    multiple=True,
    metavar="REV",
    help="Compare the runs of these revisions side by side (repeat it): git commits, branches, tags or DVC experiments, "
    "'workspace' for the files as they are. Each revision's own params choose its matrix and cluster.",
)
@click.option(
    "--to",
    type=FiniteFloat(min=1),
    default=None,
    help="What the comparison's time column counts to, in tokens or samples [default: 1e9 tokens, 1e6 samples].",
)
@project_option
def report(
    stages: tuple[str, ...],
    cluster: str | None,
    out: Path,
    pue: float | None,
    carbon_intensity: float | None,
    accounting: bool,
    revs: tuple[str, ...],
    to: float | None,
    project: Path,
) -> None:
    """Scaling report of STAGES (default: every stage with a run that has a throughput).

    Throughput, speedup and weak/strong scaling efficiency against the smallest
    configuration, step times, loss curves, MFU against each profile's peak, energy
    (Slurm accounting, else sampled during the run, else an estimate, each marked)
    and emissions, with each run's hardware and software. Writes report.html (one
    file, no network needed), summary.md, report.json and DVC plots data into --out.
    A run without metrics is listed as missing, never counted as 0.

    With --rev, the runs of each revision named (one matrix run on several clusters,
    each kept in its own commit or DVC experiment) are compared: one line per revision
    on each scaling figure and a side-by-side table per series, each run's MFU against
    its own cluster's peak. Only the small files of each run are read from DVC's cache.
    """
    import tempfile

    from orchestrator.analysis import energy, report
    from orchestrator.analysis import report_write as render
    from orchestrator.analysis.revisions import WORKSPACE, Revision
    from orchestrator.analysis.runs import load_profiles
    from orchestrator.errors import OrchestratorError, PipelineError
    from orchestrator.util.runner import SubprocessRunner

    try:
        import matplotlib  # noqa: F401 - checked first: a missing one should cost no sacct query
    except ImportError as exc:
        raise OrchestratorError(
            "the report draws its figures with matplotlib, which is not installed", hints=["pip install matplotlib"]
        ) from exc
    repeated = sorted({r for r in revs if revs.count(r) > 1})
    if repeated:
        raise click.UsageError(f"--rev {', '.join(repeated)} named more than once")
    runner = SubprocessRunner()
    with tempfile.TemporaryDirectory(prefix="orchestrator-report-") as scratch:
        runs: list = []
        fallbacks: dict = {}  # by revision: the profile its params choose, for runs whose provenance names none
        shown_cluster = ", ".join(revs)
        for n, rev in enumerate(revs or (None,)):
            if rev is None or rev == WORKSPACE:
                root, chosen = project, cluster
            else:
                revision = Revision(project, rev)
                root, chosen = Path(scratch) / str(n), None  # the revision's own params choose its cluster
                revision.read_pipeline(root)
            found, ws = _runs(root, chosen, stages, runner, rev, None if root == project else revision)
            runs += found
            fallbacks[rev] = ws.profile
            if root == project:
                shown_cluster = ws.cluster
        if not stages:
            from orchestrator.analysis.runs import with_throughput

            chosen_stages = with_throughput(runs)
            if not chosen_stages:
                raise PipelineError(
                    "no run has metrics with a throughput yet",
                    [f"{r.key}: {r.problem or 'no tokens_per_second or samples_per_second'}" for r in runs],
                    hints=["run the pipeline first (dvc repro), or name the stages to report"],
                )
            runs = [r for r in runs if r.expected.stage in chosen_stages]
        profiles, notes = {}, []
        for source, fallback in fallbacks.items():
            chosen_profiles, profile_notes = load_profiles([r for r in runs if r.source == source], fallback)
            profiles |= chosen_profiles
            notes += profile_notes
    acct = None
    slurm_jobs = sorted(
        {
            str(r.provenance["job_id"])
            for r in runs
            if r.provenance and r.provenance.get("backend") == "slurm" and r.provenance.get("job_id")
        }
    )
    if accounting and slurm_jobs:
        acct = energy.query_accounting(runner, slurm_jobs)
    result = report.build(runs, profiles, acct, report.Overrides(pue, carbon_intensity), shown_cluster, notes, to)
    folder = out if out.is_absolute() else project / out
    written = render.write(result, folder)
    for s in result.series:
        present = [r for r in s.rows if not r.run.missing]
        click.echo(
            f"{s.label}: {len(present)} run(s), {len(s.rows) - len(present)} missing, {s.mode} scaling, baseline {s.baseline or '-'}"
        )
    for r in result.missing:
        click.echo(f"  missing: {r.run.key} ({r.run.problem})")
    click.echo(f"wrote {len(written)} file(s) into {folder}: report.html, summary.md, report.json, plots/, figures/")


def _runs(root: Path, cluster: str | None, targets: tuple[str, ...], runner, source: str | None, revision) -> tuple[list, Workspace]:
    """The runs of ``root``'s pipeline (a revision's files when ``revision`` is given: read
    from it first) and its workspace (the cluster and profile its params choose)."""
    from orchestrator.analysis.runs import METRICS_FILE, expected_runs, read_run
    from orchestrator.errors import PipelineError
    from orchestrator.pipeline import stages as pipeline
    from orchestrator.scripts.workspace import Workspace

    ws = Workspace.open(root, cluster, runner)
    items = ws.items(targets)
    found, _ = pipeline.jobs(items)
    expected = expected_runs(items, {j.item.name: j.spec for j in found})
    where = f"revision {source}'s {pipeline.PIPELINE_FILE}" if revision is not None else str(root / pipeline.PIPELINE_FILE)
    if not expected:
        raise PipelineError(
            f"no {METRICS_FILE} among the outputs of {', '.join(targets) or 'any stage'} in {where}",
            hints=["a run is an item with a metrics.json output (metrics: or outs:)"],
        )
    if revision is not None:
        revision.read_runs([e.directory for e in expected], root)
    return [read_run(root, e, source) for e in expected], ws
