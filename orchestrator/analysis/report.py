"""The scaling report: every run of a stage gathered and compared with the smallest configuration.

A *run* is a dvc.yaml item with a ``metrics.json`` output (the training's results
file, ``experiments/metrics.py``). Beside it lie ``provenance.json`` (written by
the orchestrator when the job succeeded: job id, backend, nodes, elapsed time,
requeues, profile) and ``dvclive/plots/metrics/**.tsv`` (the per-step curves).
An item whose ``metrics.json`` is absent or unreadable is *missing*: it is listed,
and its values are shown as missing, never as 0.

Runs are grouped into *series*: the runs of one stage whose folders differ only
in the ``<nodes>x<gpus>`` component (``results/benchmark/<dataset>/<model>/2x8``),
i.e. the same workload on different GPU counts. Within a series, with T the
throughput (``tokens_per_second``, else ``samples_per_second``), n the GPU count
and b the run with the fewest GPUs that has a throughput (the *baseline*)::

    speedup     S(n) = T(n) / T(b)
    ideal       I(n) = n / n_b
    efficiency  E(n) = S(n) / I(n) = (T(n) / n) / (T(b) / n_b)

Whether that is strong or weak scaling is read from the metrics: a global batch
(``global_batch_size``) that stays fixed while the per-device batch
(``batch_size``) shrinks is *strong* scaling (a fixed problem split further;
E = t(b) n_b / (t(n) n), the classic parallel efficiency); a per-device batch that
stays fixed while the global batch grows with n is *weak* scaling (work per GPU
fixed; E = step_time(b) / step_time(n), the same number, since T = batch x n /
step_time). Anything else is *mixed*: E is then only throughput per device
relative to the baseline.

MFU is model FLOP/s per device (``model_flops_per_second``, ``model_tflops_per_device``,
or ``tokens_per_second`` x ``flops_per_token``) over the device's peak from the run's
*profile* (``node.gpu.peak_tflops_bf16``), so it compares across clusters; a run's own
``mfu`` is shown only when it cannot be recomputed that way, and the page says so.
Energy and emissions: see :mod:`energy`; the estimate's GPU-hours use the elapsed
time of every run of a requeued job when accounting lists them, else provenance's.

Reading files happens in :func:`read_run` and :func:`load_profiles`; the
arithmetic (:func:`scale`, :func:`build`) is pure. :mod:`report_render` writes
the outputs.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from orchestrator.analysis import energy
from orchestrator.analysis.mfu import mfu, number
from orchestrator.config import profile
from orchestrator.pipeline import runargs, stages

METRICS_FILE = "metrics.json"
CURVES_DIR = "dvclive/plots/metrics"
THROUGHPUTS = (("tokens_per_second", "tokens/s"), ("samples_per_second", "samples/s"))
_CONFIG = re.compile(r"(\d+)x(\d+)")
Mode = Literal["weak", "strong", "mixed", "single"]


# --- runs and what was read of them ------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """A run dvc.yaml promises: an item with a metrics.json output."""

    item: str
    stage: str
    directory: str  # the metrics file's folder, relative to the project root
    nodes: int | None  # from its `orchestrator run` arguments, else its folder's NxG
    gpus_per_node: int | None

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
    metrics: Mapping[str, Any] | None  # metrics.json as written by the training; None: missing
    provenance: Mapping[str, Any] | None
    curves: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)  # "train/loss" -> (step, value)
    problem: str | None = None  # why the metrics are missing

    @property
    def missing(self) -> bool:
        return self.metrics is None


def expected_runs(items: Sequence[stages.Item], specs: Mapping[str, runargs.JobSpec]) -> list[Expected]:
    """Every item with a metrics.json output, with its GPU layout where it can be known."""
    found = []
    for item in items:
        for out in item.outputs:
            if posixpath.basename(out) != METRICS_FILE:
                continue
            directory = posixpath.dirname(out)
            job = specs.get(item.name)
            nodes, gpus = (job.nodes, job.gpus_per_node) if job else _config_of(directory)
            found.append(Expected(item.name, item.group, directory, nodes, gpus))
    return found


def _config_of(directory: str) -> tuple[int | None, int | None]:
    for part in reversed(directory.split("/")):
        m = _CONFIG.fullmatch(part)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None, None


def read_run(root: Path, expected: Expected) -> Run:
    folder = root / expected.directory
    metrics, problem = _read_json(folder / METRICS_FILE, f"{expected.directory}/{METRICS_FILE}")
    prov, _ = _read_json(folder / stages.PROVENANCE_FILE, f"{expected.directory}/{stages.PROVENANCE_FILE}")
    return Run(expected, metrics, prov, read_curves(folder / CURVES_DIR) if metrics is not None else {}, problem)


def _read_json(path: Path, shown: str) -> tuple[dict | None, str | None]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None, f"no {shown}"
    except (OSError, ValueError) as exc:
        return None, f"{shown} is unreadable: {exc}"
    if not isinstance(data, dict):
        return None, f"{shown} is not a JSON object"
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


def load_profiles(runs: Sequence[Run], fallback: profile.LoadedProfile) -> tuple[dict[str, profile.Profile], list[str]]:
    """Each run's profile, by item: the one its provenance names (built-in, or the file it was
    read from when that is still there), else ``fallback``; and notes on every fallback."""
    cache: dict[tuple[str, str], profile.Profile | None] = {}
    chosen: dict[str, profile.Profile] = {}
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
                except profile.ProfileError:
                    cache[key] = None
            found = cache[key]
            if found is None:
                notes.append(f"{run.expected.item}: its profile {name} ({source}) cannot be loaded here; used {fallback.name}")
        elif not run.missing:
            notes.append(f"{run.expected.item}: no provenance.json names its profile; used {fallback.name}")
        chosen[run.expected.item] = found or fallback.profile
    return chosen, notes


# --- arithmetic ------------------------------------------------------------------


def throughput_of(metrics: Mapping[str, Any]) -> tuple[float | None, str | None]:
    for key, unit in THROUGHPUTS:
        value = number(metrics.get(key))
        if value is not None and value > 0:
            return value, unit
    return None, None


@dataclass(frozen=True)
class Point:
    """One configuration as the scaling arithmetic sees it."""

    gpus: int
    throughput: float | None  # None: missing
    batch_per_device: float | None = None
    global_batch: float | None = None


@dataclass(frozen=True)
class Scaled:
    speedup: float | None
    ideal: float | None
    efficiency: float | None


def baseline_index(points: Sequence[Point]) -> int | None:
    """The point with the fewest GPUs that has a throughput (the first of equals)."""
    present = [i for i, p in enumerate(points) if p.throughput is not None and p.gpus >= 1]
    return min(present, key=lambda i: points[i].gpus) if present else None


def scale(points: Sequence[Point]) -> list[Scaled]:
    """Speedup, ideal speedup and efficiency of each point against the baseline; None where missing."""
    b = baseline_index(points)
    if b is None:
        return [Scaled(None, None, None) for _ in points]
    base = points[b]
    out = []
    for p in points:
        if p.throughput is None or p.gpus < 1:
            out.append(Scaled(None, None, None))
            continue
        speedup = p.throughput / base.throughput  # type: ignore[operator]
        ideal = p.gpus / base.gpus
        out.append(Scaled(speedup, ideal, speedup / ideal))
    return out


def scaling_mode(points: Sequence[Point]) -> Mode:
    """Weak, strong or mixed scaling, read from the batch sizes of the points with a throughput."""
    present = [p for p in points if p.throughput is not None and p.gpus >= 1]
    if len({p.gpus for p in present}) < 2:
        return "single"
    per_device = {p.batch_per_device for p in present}
    global_ = {p.global_batch for p in present}
    if None in per_device or None in global_:
        return "mixed"
    if len(per_device) == 1 and len(global_) > 1:
        return "weak"
    if len(global_) == 1 and len(per_device) > 1:
        return "strong"
    return "mixed"


def _profiled_seconds(profile: Any) -> dict[str, float]:
    """The profiler window's breakdown (``--profile-steps``: ``{step_ms, kernel_pct, ...}``)
    as seconds per step, keyed ``profile_<category>`` for the step-time chart."""
    if not isinstance(profile, Mapping) or (step_ms := number(profile.get("step_ms"))) is None:
        return {}
    return {
        f"profile_{key.removesuffix('_pct')}": pct / 100 * step_ms / 1000
        for key, raw in sorted(profile.items())
        if key.endswith("_pct") and (pct := number(raw)) is not None
    }


# --- the report ------------------------------------------------------------------


@dataclass(frozen=True)
class Overrides:
    pue: float | None = None
    carbon_intensity_g_per_kwh: float | None = None


@dataclass(frozen=True)
class Row:
    run: Run
    profile: str
    device: str
    gpus: int | None
    throughput: float | None
    scaled: Scaled
    step_time_s: float | None
    breakdown: Mapping[str, float]  # profile_* keys of the metrics
    mfu: float | None
    mfu_note: str
    energy: energy.Energy
    emissions: energy.Emissions

    @property
    def item(self) -> str:
        return self.run.expected.item

    @property
    def config(self) -> str:
        return self.run.expected.config

    def metric(self, key: str) -> Any:
        return (self.run.metrics or {}).get(key)


@dataclass(frozen=True)
class Series:
    name: str
    stage: str
    unit: str | None  # throughput unit, "tokens/s" or "samples/s"
    mode: Mode
    baseline: str | None  # config of the baseline run
    rows: tuple[Row, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Report:
    cluster: str
    series: tuple[Series, ...]
    notes: tuple[str, ...] = ()

    @property
    def rows(self) -> list[Row]:
        return [r for s in self.series for r in s.rows]

    @property
    def missing(self) -> list[Row]:
        return [r for r in self.rows if r.run.missing]


def build(
    runs: Sequence[Run],
    profiles: Mapping[str, profile.Profile],
    accounting: energy.Accounting | None,
    overrides: Overrides,
    cluster: str,
    notes: Sequence[str] = (),
) -> Report:
    """The report of ``runs`` (pure: every input read or queried beforehand)."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.expected.stage, run.expected.series), []).append(run)
    series = [_series(stage, name, members, profiles, accounting, overrides) for (stage, name), members in groups.items()]
    all_notes = list(notes)
    if accounting is not None and accounting.problem:
        all_notes.append(f"energy accounting: {accounting.problem}")
    return Report(cluster, tuple(series), tuple(all_notes))


def _series(stage, name, runs, profiles, accounting, overrides) -> Series:
    runs = sorted(runs, key=lambda r: (_gpus(r) is None, _gpus(r) or 0, r.expected.nodes or 0, r.expected.item))
    points = [_point(r) for r in runs]
    scaled = scale(points)
    units = {throughput_of(r.metrics)[1] for r in runs if r.metrics is not None} - {None}
    notes = []
    if len(units) > 1:
        notes.append(f"the runs report different throughputs ({', '.join(sorted(units))}): compare with care")  # type: ignore[arg-type]
    b = baseline_index(points)
    baseline = runs[b].expected.config if b is not None else None
    smallest = runs[0].expected.config if runs else None
    if b is not None and b != 0 and runs[0].missing:
        notes.append(f"baseline {baseline}: the smallest configuration {smallest} has no metrics")
    for run in runs:
        m = run.metrics or {}
        declared, ran = run.expected.gpus_per_node, number(m.get("devices"))
        if ran is not None and declared is not None and int(ran) != declared:
            notes.append(f"{run.expected.item}: dvc.yaml asks for {declared} GPU(s) per node, the run used {int(ran)}")
    rows = tuple(_row(r, p, s, profiles[r.expected.item], accounting, overrides) for r, p, s in zip(runs, points, scaled, strict=True))
    return Series(name, stage, units.pop() if len(units) == 1 else None, scaling_mode(points), baseline, rows, tuple(notes))


def _gpus(run: Run) -> int | None:
    m = run.metrics or {}
    world = number(m.get("world_size"))
    if world:
        return int(world)
    e = run.expected
    return e.nodes * e.gpus_per_node if e.nodes and e.gpus_per_node else None


def _point(run: Run) -> Point:
    m = run.metrics or {}
    throughput = throughput_of(m)[0] if run.metrics is not None else None
    return Point(_gpus(run) or 0, throughput, number(m.get("batch_size")), number(m.get("global_batch_size")))


def _row(run: Run, point: Point, scaled: Scaled, prof: profile.Profile, accounting: energy.Accounting | None, overrides: Overrides) -> Row:
    m = run.metrics
    gpu = prof.node.gpu
    device = "CPU" if m is not None and m.get("accelerator") == "cpu" else (gpu.model if gpu else "CPU")
    if m is None:
        nothing = energy.Energy(None, None, None, ("missing run",))
        em = energy.Emissions(None, None, None, "missing run")
        return Row(run, prof.name, device, _gpus(run), None, scaled, None, {}, None, "missing run", nothing, em)
    breakdown = {k: v for k, raw in sorted(m.items()) if k.startswith("profile_") and (v := number(raw)) is not None}
    breakdown |= _profiled_seconds(m.get("profile"))
    value, note = mfu(m, gpu.peak_tflops_bf16 if gpu and device != "CPU" else None, prof.name)
    en = _energy(run, prof, accounting, device)
    em = energy.emissions(en, *_site(prof, overrides))
    return Row(run, prof.name, device, _gpus(run), point.throughput, scaled, number(m.get("mean_step_time_s")), breakdown, value, note, en, em)


def _site(prof: profile.Profile, overrides: Overrides) -> tuple[float | None, float | None, str]:
    """PUE and carbon intensity (options win over the profile), and where they come from."""
    site = f"{prof.name}'s site ({prof.site.source or 'no source given'})"
    pue, carbon = overrides.pue, overrides.carbon_intensity_g_per_kwh
    where = [
        "--pue" if pue is not None else f"PUE from {site}",
        "--carbon-intensity" if carbon is not None else f"carbon intensity from {site}",
    ]
    if pue is None and carbon is None:
        where = [site]
    pue = pue if pue is not None else prof.site.pue
    carbon = carbon if carbon is not None else prof.site.carbon_intensity_g_per_kwh
    return pue, carbon, ", ".join(where)


def _energy(run: Run, prof: profile.Profile, accounting: energy.Accounting | None, device: str) -> energy.Energy:
    prov = run.provenance or {}
    job_id = prov.get("job_id")
    acct = accounting
    if prov.get("backend") != "slurm":
        accounted = (None, f"not a Slurm job (backend {prov.get('backend') or 'unknown'})")
        acct = None
    elif accounting is not None and prof.scheduler.cluster_name and accounting.cluster_name and prof.scheduler.cluster_name != accounting.cluster_name:
        accounted = (None, f"the job ran on {prof.scheduler.cluster_name}; this is {accounting.cluster_name}'s accounting")
        acct = None
    else:
        accounted = energy.from_accounting(accounting, job_id)
    sampled = energy.from_samples(run.metrics)
    elapsed = energy.accounted_elapsed_s(acct, job_id)
    extra = ""
    if elapsed is None:
        elapsed = number(prov.get("elapsed_s"))
        if elapsed is not None and (prov.get("requeues") or 0) > 0:
            extra = f" (the last of {prov['requeues'] + 1} runs only)"
    power = prof.node.gpu.power_w if prof.node.gpu and device != "CPU" else None
    joules, note = energy.estimate(power, _gpus(run), elapsed)
    return energy.choose(accounted, sampled, (joules, note + extra), acct.plugin if acct else None)


def metrics_of(report: Report) -> dict[str, dict[str, Any]]:
    """Per item, what the report computed (the report's own DVC metrics file)."""
    out = {}
    for s in report.series:
        for r in s.rows:
            out[r.item] = {
                "config": r.config,
                "gpus": r.gpus,
                "missing": r.run.missing,
                "throughput": r.throughput,
                "throughput_unit": s.unit,
                "speedup": r.scaled.speedup,
                "efficiency": r.scaled.efficiency,
                "scaling": s.mode,
                "mfu": r.mfu,
                **energy.as_metrics(r.energy, r.emissions),
            }
    return out
