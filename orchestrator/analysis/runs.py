"""Runs: the items of a pipeline that have results, and what was read of them.

A *run* is a dvc.yaml item that declares metrics files (its ``metrics:`` entries, whatever
their names: JSON, YAML or TOML, read as ``dvc metrics show`` reads them; for an item that
declares none, an output named ``metrics.json``, the shipped training's results file,
``experiments/common/metrics.py``). Beside its first metrics file lie ``provenance.json``
(written by the orchestrator when the job succeeded: job id, backend, nodes, elapsed time,
requeues, profile; kept under ``.orchestrator/provenance/`` instead where the stage
does not declare it, :mod:`orchestrator.jobs.provenance`) and
``dvclive/plots/metrics/**.tsv`` (the per-step curves).
An item whose metrics file is absent or unreadable is *missing*: it is listed,
and its values are shown as missing, never as 0.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.analysis.scaling import throughput_of
from orchestrator.config import profile
from orchestrator.config.profile_schema import LoadedProfile, Profile
from orchestrator.errors import ProfileError
from orchestrator.pipeline import runargs, stages

# The shipped training's results file: read where an item declares no `metrics:` but has an
# output by this name (the report read only this name before it read `metrics:`).
METRICS_FILE = "metrics.json"
CURVES_DIR = "dvclive/plots/metrics"
_CONFIG = re.compile(r"(\d+)x(\d+)")


@dataclass(frozen=True)
class Expected:
    """A run dvc.yaml promises: an item with metrics files."""

    item: str
    stage: str
    directory: str  # its (first) metrics file's folder, relative to the project root: provenance and curves lie there
    nodes: int | None  # from its `orchestrator run` arguments, else its folder's NxG
    gpus_per_node: int | None
    metrics_files: tuple[str, ...] = ()  # relative to the project root; none: the folder's metrics.json

    @property
    def files(self) -> tuple[str, ...]:
        """The metrics files the run is read from, in the order dvc.yaml declares them."""
        return self.metrics_files or (posixpath.join(self.directory, METRICS_FILE),)

    @property
    def config(self) -> str:
        return f"{self.nodes}x{self.gpus_per_node}" if self.nodes and self.gpus_per_node else "?"

    @property
    def series(self) -> str:
        """The folder without its NxG component: the same workload at every GPU count."""
        parts = self.directory.split("/")
        kept = [p for p in parts if p != self.config]
        return "/".join(kept) if len(kept) < len(parts) else self.stage


@dataclass(frozen=True)
class Run:
    expected: Expected
    metrics: Mapping[str, Any] | None  # its metrics files as written by the training (merged); None: missing
    provenance: Mapping[str, Any] | None
    curves: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)  # "train/loss" -> (step, value)
    problem: str | None = None  # why the metrics are missing
    source: str | None = None  # the revision it was read from (``orchestrator report --rev``); None: this workspace alone

    @property
    def missing(self) -> bool:
        return self.metrics is None

    @property
    def key(self) -> str:
        """Its name across revisions: the item, after the revision's name when it has one."""
        return f"{self.source}:{self.expected.item}" if self.source else self.expected.item


def expected_runs(items: Sequence[stages.Item], specs: Mapping[str, runargs.JobSpec]) -> list[Expected]:
    """Every item with metrics files, with its GPU layout where it can be known: one run per
    item (an item's several metrics files are one run's), so each item is one row."""
    found = []
    for item in items:
        declared = item.metric_files or tuple(o for o in item.outputs if posixpath.basename(o) == METRICS_FILE)
        if not declared:
            continue
        directory = posixpath.dirname(declared[0])
        job = specs.get(item.name)
        nodes, gpus = (job.nodes, job.gpus_per_node) if job else _config_of(directory)
        found.append(Expected(item.name, item.group, directory, nodes, gpus, declared))
    return found


def metrics_named(runs: Sequence[Run]) -> str:
    """How messages name the runs' metrics files: their file name where every run's is the same
    (``metrics.json``, ``scores.yaml``), else "metrics file"."""
    names = {posixpath.basename(f) for r in runs for f in r.expected.files}
    return names.pop() if len(names) == 1 else "metrics file"


def _config_of(directory: str) -> tuple[int | None, int | None]:
    for part in reversed(directory.split("/")):
        m = _CONFIG.fullmatch(part)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None, None


# The metrics keys the report reads that a project may write under names of its own
# (`orchestrator report --metric NAME=KEY`): the throughput (one of the two), and what it is scaled by.
MAPPABLE = ("tokens_per_second", "samples_per_second", "mean_step_time_s", "batch_size", "global_batch_size", "flops_per_token")


def parse_mapping(given: Sequence[str]) -> dict[str, str]:
    """``--metric NAME=KEY`` values as {NAME: KEY}; one ConfigError naming every bad one and the valid names."""
    from orchestrator.errors import ConfigError

    mapping: dict[str, str] = {}
    problems = []
    for text in given:
        name, sep, key = text.partition("=")
        name, key = name.strip(), key.strip()
        if not sep or not name or not key:
            problems.append(f"{text!r}: write NAME=KEY, the report's name and your metrics file's key (e.g. samples_per_second=throughput)")
        elif name not in MAPPABLE:
            problems.append(f"{text!r}: the report has no metric {name!r}")
        elif name in mapping:
            problems.append(f"{text!r}: {name} is mapped twice")
        else:
            mapping[name] = key
    if problems:
        raise ConfigError("--metric: cannot map these", problems, hints=[f"the report's metrics: {', '.join(MAPPABLE)}"])
    return mapping


def lookup(metrics: Mapping[str, Any], key: str) -> Any:
    """``key`` of a metrics file: a top-level key, else a dotted path into nested mappings (as `dvc metrics show` names them)."""
    if key in metrics:
        return metrics[key]
    value: Any = metrics
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


KEPT_PROVENANCE = "provenance"  # under the orchestrator's state folder: the provenance of stages that do not declare it


def kept_provenance(root: Path, folder: str) -> Path:
    """Where the provenance of a metrics folder is kept when its stage does not declare it
    (written by :func:`orchestrator.jobs.provenance.write_beside`)."""
    from orchestrator.scripts.workspace import STATE_DIR

    return root / STATE_DIR / KEPT_PROVENANCE / folder / stages.PROVENANCE_FILE


def find_provenance(root: Path, folder: str) -> Path:
    """The provenance file of a metrics folder: beside the metrics if there is one, else where it is kept."""
    beside = root / folder / stages.PROVENANCE_FILE
    return beside if beside.exists() else kept_provenance(root, folder)


def flat_keys(metrics: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every key of a metrics file, nested ones as dotted paths (what ``--metric NAME=KEY`` takes), sorted."""
    found = []
    for key, value in metrics.items():
        path = f"{prefix}{key}"
        found += flat_keys(value, f"{path}.") if isinstance(value, Mapping) and value else [path]
    return sorted(found)


def read_run(root: Path, expected: Expected, source: str | None = None, mapping: Mapping[str, str] | None = None) -> Run:
    """The run's metrics (with ``mapping``'s keys read under the report's names), provenance and curves.

    Several metrics files of one item are merged, a key of an earlier one winning; the run is
    missing while any of them is (DVC would not have recorded the item as done)."""
    folder = root / expected.directory
    metrics: dict[str, Any] | None = {}
    problem = None
    for path in expected.files:
        found_metrics, problem = _read_metrics(root / path, path)
        if found_metrics is None:
            metrics = None
            break
        metrics = {**found_metrics, **(metrics or {})}
    if metrics is not None and mapping:
        # The report's name wins only where the user's key is there: a run without it stays without.
        metrics = {**metrics, **{name: v for name, key in mapping.items() if (v := lookup(metrics, key)) is not None}}
    found = find_provenance(root, expected.directory)
    prov, _ = _read_metrics(found, found.relative_to(root).as_posix())
    if problem and source:
        problem += f" at {source}"
    return Run(expected, metrics, prov, read_curves(folder / CURVES_DIR) if metrics is not None else {}, problem, source)


def _read_metrics(path: Path, shown: str) -> tuple[dict | None, str | None]:
    """A metrics (or provenance) file read as DVC reads metrics: by its suffix, JSON, TOML or
    Python, else YAML (DVC's own loaders, so a file `dvc metrics show` reads reads the same here)."""
    from dvc.utils.serialize import LOADERS, ParseError

    try:
        data = LOADERS[path.suffix.lower()](str(path))
    except FileNotFoundError:
        return None, f"no {shown}"
    except ParseError as exc:
        # DVC's message names the path relative to the current folder; its cause says where in the file.
        cause = exc.__cause__
        mark, what = getattr(cause, "problem_mark", None), getattr(cause, "problem", None)
        said = f"{what} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None and what else str(cause or exc)
        return None, f"{shown} is unreadable: {said}"
    except (OSError, ValueError) as exc:
        return None, f"{shown} is unreadable: {exc}"
    if not isinstance(data, dict):
        return None, f"{shown} is not a mapping of metrics (it holds a {type(data).__name__})"
    return data, None


def read_curves(folder: Path) -> dict[str, tuple[tuple[float, float], ...]]:
    """DVCLive's per-step TSVs (``step<TAB>value``) under ``folder``, by name (``train/loss``)."""
    curves = {}
    for path in sorted(folder.rglob("*.tsv")) if folder.is_dir() else ():
        points = []
        for line in path.read_text().splitlines()[1:]:
            parts = line.split("\t")
            try:
                points.append((float(parts[0]), float(parts[-1])))
            except (ValueError, IndexError):
                continue  # a half-written last line of a running job
        if points:
            curves[path.relative_to(folder).with_suffix("").as_posix()] = tuple(points)
    return curves


def with_throughput(runs: Sequence[Run]) -> list[str]:
    """The stages that have at least one run with a throughput (the default selection)."""
    stages = []
    for run in runs:
        if run.metrics is not None and throughput_of(run.metrics)[0] is not None and run.expected.stage not in stages:
            stages.append(run.expected.stage)
    return stages


def load_profiles(runs: Sequence[Run], fallback: LoadedProfile) -> tuple[dict[str, Profile], list[str]]:
    """Each run's profile, by item: the one its provenance names (built-in, or the file it was
    read from when that is still there), else ``fallback``; and notes on every fallback."""
    cache: dict[tuple[str, str], Profile | None] = {}
    chosen: dict[str, Profile] = {}
    notes = []
    for run in runs:
        prov = run.provenance or {}
        name, source = prov.get("profile"), prov.get("profile_source")
        found = None
        if isinstance(name, str):
            key = (name, str(source))
            if key not in cache:
                where = name if source == "built-in" else str(source)
                try:
                    cache[key] = profile.load(where).profile
                except ProfileError:
                    cache[key] = None
            found = cache[key]
            if found is None:
                notes.append(f"{run.key}: its profile {name} ({source}) cannot be loaded here; used {fallback.name}")
        elif not run.missing:
            notes.append(f"{run.key}: no provenance.json names its profile; used {fallback.name}")
        chosen[run.key] = found or fallback.profile
    return chosen, notes
