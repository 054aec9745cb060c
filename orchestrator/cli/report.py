"""`orchestrator report`: the scaling report of a pipeline's runs.

Gathering the runs lives in :mod:`orchestrator.analysis.gather`, arithmetic in :mod:`~orchestrator.analysis.report`,
energy in :mod:`~orchestrator.analysis.energy`, the files in :mod:`~orchestrator.analysis.report_write`; this module
takes the options, asks Slurm's accounting once for every job, and says what it wrote.
"""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.options import FiniteFloat, cluster_option, project_option


@click.command("report")
@click.argument("stages", nargs=-1)
@cluster_option("Profile whose params overlay chose the matrix, also used for runs whose provenance names none")
@click.option(
    "--out",
    "-o",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("reports"),
    show_default=True,
    help="Output folder (relative to the project).",
)
@click.option(
    "--pue", type=FiniteFloat(min=1), default=None, show_default="each run's profile's site.pue", help="Power usage effectiveness."
)
@click.option(
    "--carbon-intensity",
    type=FiniteFloat(min=0),
    default=None,
    show_default="each run's profile's site.carbon_intensity_g_per_kwh",
    help="g CO2e per kWh.",
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
    show_default="1e9 tokens, 1e6 samples",
    help="What the comparison's time column counts to, in tokens or samples.",
)
@click.option(
    "--metric",
    "metric_map",
    multiple=True,
    metavar="NAME=KEY",
    help="Read the report's metric NAME from your metrics files' KEY (a dotted path into nested values works), "
    "e.g. samples_per_second=throughput. Repeatable. NAME: tokens_per_second, samples_per_second, mean_step_time_s, "
    "batch_size, global_batch_size, flops_per_token.",
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
    metric_map: tuple[str, ...],
    project: Path,
) -> None:
    """Scaling report of STAGES (default: every stage with a run that has a throughput).

    Throughput, speedup and weak/strong scaling efficiency against the smallest
    configuration, step times, loss curves, MFU against each profile's peak, energy
    (Slurm accounting, else sampled during the run, else an estimate, each marked)
    and emissions, with each run's hardware and software. Writes report.html (one
    file, no network needed), summary.md, report.json and DVC plots data into --out.
    A run without metrics is listed as missing, never counted as 0. A run is an item
    of dvc.yaml with metrics files (its metrics: entries, any name, JSON, YAML or TOML).

    With --rev, the runs of each revision named (one matrix run on several clusters,
    each kept in its own commit or DVC experiment) are compared: one line per revision
    on each scaling figure and a side-by-side table per series, each run's MFU against
    its own cluster's peak. Only the small files of each run are read from DVC's cache.
    """
    from orchestrator.analysis import energy, report
    from orchestrator.analysis import report_write as render
    from orchestrator.analysis.gather import gather, slurm_jobs
    from orchestrator.analysis.runs import parse_mapping
    from orchestrator.errors import OrchestratorError
    from orchestrator.util.runner import SubprocessRunner

    try:
        import matplotlib  # noqa: F401 - checked first: a missing one should cost no sacct query
    except ImportError as exc:
        raise OrchestratorError(
            "the report draws its figures with matplotlib, which is not installed", hints=["pip install matplotlib"]
        ) from exc
    mapping = parse_mapping(metric_map)  # before anything is read or asked
    repeated = sorted({r for r in revs if revs.count(r) > 1})
    if repeated:
        raise click.UsageError(f"--rev {', '.join(repeated)} named more than once")
    runner = SubprocessRunner()
    found = gather(project, cluster, stages, revs, mapping, runner)
    acct = None
    jobs = slurm_jobs(found.runs)
    if accounting and jobs:
        acct = energy.query_accounting(runner, jobs)
    result = report.build(found.runs, found.profiles, acct, report.Overrides(pue, carbon_intensity), found.cluster, found.notes, to)
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
