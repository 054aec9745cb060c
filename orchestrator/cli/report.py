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
    from orchestrator.config.profile_schema import Profile
    from orchestrator.scripts.workspace import Workspace


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
    help="Read the report's metric NAME from your metrics.json's KEY (a dotted path into nested values works), "
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
    from orchestrator.analysis.runs import load_profiles, parse_mapping
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
            found, ws = _runs(root, chosen, stages, runner, rev, None if root == project else revision, mapping)
            runs += found
            fallbacks[rev] = ws.profile
            if root == project:
                shown_cluster = ws.cluster
        _unused_mapping(runs, mapping)  # a typo in a key first: it would read as runs without a throughput
        if not stages:
            from orchestrator.analysis.runs import with_throughput

            chosen_stages = with_throughput(runs)
            if not chosen_stages:
                raise _no_throughput(runs, mapping)
            runs = [r for r in runs if r.expected.stage in chosen_stages]
        profiles: dict[str, Profile] = {}
        notes: list[str] = []
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


# How many runs an error lists before "(+N more)": a matrix of hundreds would bury the advice.
_SHOWN = 5


def _shown(lines: list[str]) -> list[str]:
    return lines[:_SHOWN] + ([f"(+{len(lines) - _SHOWN} more)"] if len(lines) > _SHOWN else [])


def _no_throughput(runs: list, mapping: dict[str, str]):
    """No run has a throughput: which runs have no metrics yet, and which name theirs otherwise,
    with the metric the report needs and how to name or map the user's own."""
    from orchestrator.analysis.runs import flat_keys
    from orchestrator.analysis.scaling import THROUGHPUTS
    from orchestrator.errors import PipelineError

    needed = " or ".join(key for key, _ in THROUGHPUTS)
    present = [r for r in runs if r.metrics is not None]
    if not present:
        return PipelineError(
            "no run has a metrics.json yet", _shown([f"{r.key}: {r.problem}" for r in runs]), hints=["run the pipeline first (dvc repro)"]
        )
    keys = sorted({k for r in present for k in flat_keys(r.metrics)})
    mapped = [f"--metric {name}={key}" for name, key in mapping.items() if name in dict(THROUGHPUTS)]
    problems = [f"{r.key}: its metrics.json has {', '.join(flat_keys(r.metrics)) or 'no keys'}" for r in present]
    hint = (
        f"{' '.join(mapped)} found no number > 0 in any run's metrics.json"
        if mapped
        else f"write it under that name, or map your own: --metric samples_per_second=KEY (or tokens_per_second=KEY), e.g. KEY {keys[0]}"
        if keys
        else "write it in each run's metrics.json"
    )
    return PipelineError(
        f"no run's metrics.json has a throughput: the report needs {needed} (a number > 0, per second)",
        _shown(problems),
        hints=[hint, "or name the stages to report"],
    )


def _unused_mapping(runs: list, mapping: dict[str, str]) -> None:
    """A --metric KEY that no run's metrics.json has is a typo, not a metric every run lacks: one error, the keys there are."""
    from orchestrator.analysis.runs import flat_keys, lookup
    from orchestrator.errors import ConfigError

    present = [r for r in runs if r.metrics is not None]
    if not present:
        return
    unknown = [f"{name}={key}" for name, key in mapping.items() if all(lookup(r.metrics, key) is None for r in present)]
    if unknown:
        keys = sorted({k for r in present for k in flat_keys(r.metrics)})
        raise ConfigError(
            f"--metric {' '.join(unknown)}: no run's metrics.json has that key",
            hints=[f"the keys the runs have: {', '.join(keys) or 'none'}; nothing was written"],
        )


def _runs(
    root: Path, cluster: str | None, targets: tuple[str, ...], runner, source: str | None, revision, mapping: dict[str, str]
) -> tuple[list, Workspace]:
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
        # The user's metrics files by other names: the report reads metrics.json, one per run folder.
        other = sorted({o for i in items for o in i.outputs if o.endswith((".json", ".yaml", ".yml"))})
        named = f"; outputs that may be your metrics: {', '.join(_shown(other))}" if other else ""
        raise PipelineError(
            f"no {METRICS_FILE} among the outputs of {', '.join(targets) or 'any stage'} in {where}{named}",
            hints=[
                f"the report reads each run's {METRICS_FILE} (its folder is the run's): name your metrics file {METRICS_FILE} "
                "in dvc.yaml (metrics: or outs:) and in the code that writes it, with samples_per_second or tokens_per_second "
                "in it (or map your key: --metric samples_per_second=KEY)"
            ],
        )
    if revision is not None:
        revision.read_runs([e.directory for e in expected], root)
    return [read_run(root, e, source, mapping) for e in expected], ws
