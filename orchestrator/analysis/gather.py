"""The runs a report is made of: each revision's pipeline read, its runs found and read, the
stages with a throughput chosen, and the profile of each run picked.

Refuses, with what to do, a pipeline that declares no metrics files (dvc.yaml's ``metrics:``), a ``--metric`` key
that no run has, and runs of which none has a throughput. Arithmetic is
:mod:`~orchestrator.analysis.report`'s; Slurm's accounting is asked by the caller.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.analysis.revisions import WORKSPACE, Revision
from orchestrator.analysis.runs import Run
from orchestrator.config.profile_schema import LoadedProfile, Profile
from orchestrator.errors import ConfigError, OrchestratorError, PipelineError
from orchestrator.scripts.workspace import Workspace
from orchestrator.util.runner import Runner

# How many runs an error lists before "(+N more)": a matrix of hundreds would bury the advice.
_SHOWN = 5


@dataclass(frozen=True)
class Gathered:
    runs: list[Run]
    profiles: dict[str, Profile]  # by the profile name the runs' provenance gives
    notes: list[str]  # which profile stood in where, said in the report
    cluster: str  # the cluster (or revisions) the report is of, for its title


def gather(
    project: Path, cluster: str | None, stages: tuple[str, ...], revs: Sequence[str], mapping: Mapping[str, str], runner: Runner
) -> Gathered:
    """The runs of ``stages`` (every stage with a throughput when none is named) in ``project``,
    or in each revision of ``revs`` (``workspace``: the files as they are), and their profiles."""
    from orchestrator.analysis.runs import load_profiles, with_throughput

    with tempfile.TemporaryDirectory(prefix="orchestrator-report-") as scratch:
        runs: list[Run] = []
        fallbacks: dict[str | None, LoadedProfile] = {}  # by revision: the profile its params choose, for runs whose provenance names none
        shown_cluster = ", ".join(revs)
        for n, rev in enumerate(revs or (None,)):
            revision = None
            if rev is None or rev == WORKSPACE:
                root, chosen = project, cluster
            else:
                revision = Revision(project, rev)
                root, chosen = Path(scratch) / str(n), None  # the revision's own params choose its cluster
                revision.read_pipeline(root)
            found, ws = _runs(root, chosen, stages, runner, rev, revision, mapping)
            runs += found
            fallbacks[rev] = ws.profile
            if root == project:
                shown_cluster = ws.cluster
        _unused_mapping(runs, mapping)  # a typo in a key first: it would read as runs without a throughput
        if not stages:
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
    return Gathered(runs, profiles, notes, shown_cluster)


def slurm_jobs(runs: Sequence[Run]) -> list[str]:
    """The Slurm job ids the runs' provenance names, once each: what to ask the accounting about."""
    return sorted(
        {
            str(r.provenance["job_id"])
            for r in runs
            if r.provenance and r.provenance.get("backend") == "slurm" and r.provenance.get("job_id")
        }
    )


def _shown(lines: list[str]) -> list[str]:
    return lines[:_SHOWN] + ([f"(+{len(lines) - _SHOWN} more)"] if len(lines) > _SHOWN else [])


def _no_throughput(runs: list[Run], mapping: Mapping[str, str]) -> OrchestratorError:
    """No run has a throughput: which runs have no metrics yet, and which name theirs otherwise,
    with the metric the report needs and how to name or map the user's own."""
    from orchestrator.analysis.runs import flat_keys, metrics_named
    from orchestrator.analysis.scaling import THROUGHPUTS

    needed = " or ".join(key for key, _ in THROUGHPUTS)
    named = metrics_named(runs)
    present = [r for r in runs if r.metrics is not None]
    if not present:
        return PipelineError(
            f"no run has a {named} yet", _shown([f"{r.key}: {r.problem}" for r in runs]), hints=["run the pipeline first (dvc repro)"]
        )
    keys = sorted({k for r in present for k in flat_keys(r.metrics or {})})
    mapped = [f"--metric {name}={key}" for name, key in mapping.items() if name in dict(THROUGHPUTS)]
    problems = [f"{r.key}: its {metrics_named([r])} has {', '.join(flat_keys(r.metrics or {})) or 'no keys'}" for r in present]
    hint = (
        f"{' '.join(mapped)} found no number > 0 in any run's {named}"
        if mapped
        else f"write it under that name, or map your own: --metric samples_per_second=KEY (or tokens_per_second=KEY), e.g. KEY {keys[0]}"
        if keys
        else f"write it in each run's {named}"
    )
    return PipelineError(
        f"no run's {named} has a throughput: the report needs {needed} (a number > 0, per second)",
        _shown(problems),
        hints=[hint, "or name the stages to report"],
    )


def _unused_mapping(runs: list[Run], mapping: Mapping[str, str]) -> None:
    """A --metric KEY that no run's metrics file has is a typo, not a metric every run lacks: one error, the keys there are."""
    from orchestrator.analysis.runs import flat_keys, lookup, metrics_named

    present = [r for r in runs if r.metrics is not None]
    if not present:
        return
    unknown = [f"{name}={key}" for name, key in mapping.items() if all(lookup(r.metrics or {}, key) is None for r in present)]
    if unknown:
        keys = sorted({k for r in present for k in flat_keys(r.metrics or {})})
        raise ConfigError(
            f"--metric {' '.join(unknown)}: no run's {metrics_named(present)} has that key",
            hints=[f"the keys the runs have: {', '.join(keys) or 'none'}; nothing was written"],
        )


def _runs(
    root: Path,
    cluster: str | None,
    targets: tuple[str, ...],
    runner: Runner,
    source: str | None,
    revision: Revision | None,
    mapping: Mapping[str, str],
) -> tuple[list[Run], Workspace]:
    """The runs of ``root``'s pipeline (a revision's files when ``revision`` is given: read
    from it first) and its workspace (the cluster and profile its params choose)."""
    from orchestrator.analysis.runs import expected_runs, read_run
    from orchestrator.pipeline import stages as pipeline

    pipeline.require_pipeline(root)
    ws = Workspace.open(root, cluster, runner)
    items = ws.items(targets)
    found, _ = pipeline.jobs(items)
    expected = expected_runs(items, {j.item.name: j.spec for j in found})
    where = f"revision {source}'s {pipeline.PIPELINE_FILE}" if revision is not None else str(root / pipeline.PIPELINE_FILE)
    if not expected:
        # Metrics written as plain outs: the report reads what dvc.yaml declares as metrics, as `dvc metrics show` does.
        other = sorted({o for i in items for o in i.outputs if o.endswith((".json", ".yaml", ".yml", ".toml"))})
        named = f"; outputs that may be your metrics: {', '.join(_shown(other))}" if other else ""
        raise PipelineError(
            f"no metrics files declared by {', '.join(targets) or 'any stage'} in {where}{named}",
            hints=[
                "the report reads the files each stage declares under metrics: in dvc.yaml (any name; JSON, YAML or TOML, "
                "as `dvc metrics show` reads them), one run per item: declare yours there, with samples_per_second or "
                "tokens_per_second in it (or map your key: --metric samples_per_second=KEY)"
            ],
        )
    if revision is not None:
        revision.read_runs(expected, root)
    return [read_run(root, e, source, mapping) for e in expected], ws
