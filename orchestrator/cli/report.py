"""`orchestrator report`: the scaling report of a pipeline's runs.

Gathering and arithmetic live in :mod:`orchestrator.analysis.report`, energy in
:mod:`~orchestrator.analysis.energy`, the files in :mod:`~orchestrator.analysis.report_write`; this module reads the project, asks Slurm's
accounting once for every job, and says what it wrote.
"""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.options import cluster_option, project_option


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
@click.option(
    "--pue", type=click.FloatRange(min=1), default=None, help="Power usage effectiveness [default: each run's profile's site.pue]."
)
@click.option(
    "--carbon-intensity",
    type=click.FloatRange(min=0),
    default=None,
    help="g CO2e per kWh [default: each run's profile's site.carbon_intensity_g_per_kwh].",
)
@click.option("--accounting/--no-accounting", default=True, show_default=True, help="Ask Slurm's accounting (sacct) for the jobs' energy.")
@project_option
def report(
    stages: tuple[str, ...],
    cluster: str | None,
    out: Path,
    pue: float | None,
    carbon_intensity: float | None,
    accounting: bool,
    project: Path,
) -> None:
    """Scaling report of STAGES (default: every stage with a run that has a throughput).

    Throughput, speedup and weak/strong scaling efficiency against the smallest
    configuration, step times, loss curves, MFU against each profile's peak, energy
    (Slurm accounting, else sampled during the run, else an estimate, each marked)
    and emissions, with each run's hardware and software. Writes report.html (one
    file, no network needed), summary.md, report.json and DVC plots data into --out.
    A run without metrics is listed as missing, never counted as 0.
    """
    from orchestrator.analysis import energy, report
    from orchestrator.analysis import report_write as render
    from orchestrator.analysis.runs import METRICS_FILE, expected_runs, load_profiles, read_run, with_throughput
    from orchestrator.errors import OrchestratorError, PipelineError
    from orchestrator.pipeline import stages as pipeline
    from orchestrator.scripts.workspace import Workspace
    from orchestrator.util.runner import SubprocessRunner

    try:
        import matplotlib  # noqa: F401 - checked first: a missing one should cost no sacct query
    except ImportError as exc:
        raise OrchestratorError(
            "the report draws its figures with matplotlib, which is not installed", hints=["pip install matplotlib"]
        ) from exc
    runner = SubprocessRunner()
    ws = Workspace.open(project, cluster, runner)
    items = ws.items(stages)
    found, _ = pipeline.jobs(items)
    expected = expected_runs(items, {j.item.name: j.spec for j in found})
    if not expected:
        raise PipelineError(
            f"no {METRICS_FILE} among the outputs of {', '.join(stages) or 'any stage'} in {project / pipeline.PIPELINE_FILE}",
            hints=["a run is an item with a metrics.json output (metrics: or outs:)"],
        )
    runs = [read_run(project, e) for e in expected]
    if not stages:
        chosen = with_throughput(runs)
        if not chosen:
            raise PipelineError(
                "no run has metrics with a throughput yet",
                [f"{r.expected.item}: {r.problem or 'no tokens_per_second or samples_per_second'}" for r in runs],
                hints=["run the pipeline first (dvc repro), or name the stages to report"],
            )
        runs = [r for r in runs if r.expected.stage in chosen]
    profiles, notes = load_profiles(runs, ws.profile)
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
    result = report.build(runs, profiles, acct, report.Overrides(pue, carbon_intensity), ws.cluster, notes)
    folder = out if out.is_absolute() else project / out
    written = render.write(result, folder)
    for s in result.series:
        present = [r for r in s.rows if not r.run.missing]
        click.echo(f"{s.name}: {len(present)} run(s), {len(s.rows) - len(present)} missing, {s.mode} scaling, baseline {s.baseline or '-'}")
    for r in result.missing:
        click.echo(f"  missing: {r.item} ({r.run.problem})")
    click.echo(f"wrote {len(written)} file(s) into {folder}: report.html, summary.md, report.json, plots/, figures/")
