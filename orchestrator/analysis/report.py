"""The scaling report: every run of a stage gathered and compared with the smallest configuration.

Runs are read by :mod:`~orchestrator.analysis.runs`, compared by
:mod:`~orchestrator.analysis.scaling`; this module assembles the series, rows,
MFU, energy and emissions (pure), and :mod:`~orchestrator.analysis.report_write`
writes the outputs.

MFU is model FLOP/s per device (``model_flops_per_second``, ``model_tflops_per_device``,
or ``tokens_per_second`` x ``flops_per_token``) over the device's peak from the run's
*profile* (``node.gpu.peak_tflops_bf16``), so it compares across clusters; a run's own
``mfu`` is shown only when it cannot be recomputed that way, and the page says so.
Energy and emissions: see :mod:`energy`; the estimate's GPU-hours use the elapsed
time of every run of a requeued job when accounting lists them, else provenance's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.analysis import energy
from orchestrator.analysis.billing import cost as billing_cost
from orchestrator.analysis.energy import Emissions, Energy
from orchestrator.analysis.mfu import mfu, number
from orchestrator.analysis.runs import Run
from orchestrator.analysis.scaling import Mode, Scaled, ScalingPoint, baseline_index, scale, scaling_mode, throughput_of
from orchestrator.config.profile_schema import Gpu, Profile


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


@dataclass(frozen=True)
class Overrides:
    pue: float | None = None
    carbon_intensity_g_per_kwh: float | None = None


@dataclass(frozen=True)
class ReportRow:
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
    energy: Energy  # the field's name hides the module inside the class: the types by their own names
    emissions: Emissions
    cost: float | None = None  # in the site's billing units (profile's site.billing)
    cost_unit: str | None = None
    cost_note: str = ""

    @property
    def item(self) -> str:
        return self.run.expected.item

    @property
    def config(self) -> str:
        return self.run.expected.config

    def metric(self, key: str) -> Any:
        return (self.run.metrics or {}).get(key)

    @property
    def per_device(self) -> float | None:
        return self.throughput / self.gpus if self.throughput is not None and self.gpus else None

    def processed(self, unit: str | None) -> float | None:
        """Tokens (or samples) the run trained on: steps x global batch (x sequence length)."""
        steps, batch = number(self.metric("max_steps")), number(self.metric("global_batch_size"))
        per_item = number(self.metric("seq_len")) if unit == "tokens/s" else 1.0
        return steps * batch * per_item if steps and batch and per_item else None

    def per_million(self, value: float | None, unit: str | None) -> float | None:
        """``value`` (the run's energy, emissions or cost) per million tokens or samples trained on."""
        done = self.processed(unit)
        return value / done * 1e6 if value is not None and done else None


@dataclass(frozen=True)
class Series:
    name: str
    stage: str
    unit: str | None  # throughput unit, "tokens/s" or "samples/s"
    mode: Mode
    baseline: str | None  # config of the baseline run
    rows: tuple[ReportRow, ...]
    notes: tuple[str, ...] = ()
    source: str | None = None  # the revision its runs were read from; None: the workspace alone

    @property
    def label(self) -> str:
        return f"{self.name} [{self.source}]" if self.source else self.name


@dataclass(frozen=True)
class Report:
    cluster: str
    series: tuple[Series, ...]
    notes: tuple[str, ...] = ()
    to: float | None = None  # the tokens or samples the comparison's time column counts to (None: 1e9 tokens, 1e6 samples)

    @property
    def rows(self) -> list[ReportRow]:
        return [r for s in self.series for r in s.rows]

    @property
    def missing(self) -> list[ReportRow]:
        return [r for r in self.rows if r.run.missing]

    @property
    def sources(self) -> list[str]:
        """The revisions compared, in the order given; empty for one workspace's report."""
        return list(dict.fromkeys(s.source for s in self.series if s.source))

    def compared(self) -> dict[tuple[str, str], list[Series]]:
        """The series of each (stage, name), one per revision: what one figure compares."""
        out: dict[tuple[str, str], list[Series]] = {}
        for s in self.series:
            out.setdefault((s.stage, s.name), []).append(s)
        return out


def build(
    runs: Sequence[Run],
    profiles: Mapping[str, Profile],
    accounting: energy.Accounting | None,
    overrides: Overrides,
    cluster: str,
    notes: Sequence[str] = (),
    to: float | None = None,
) -> Report:
    """The report of ``runs`` (pure: every input read or queried beforehand)."""
    groups: dict[tuple[str, str, str | None], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.expected.stage, run.expected.series, run.source), []).append(run)
    series = [_series(stage, name, members, profiles, accounting, overrides, source) for (stage, name, source), members in groups.items()]
    all_notes = list(notes)
    if accounting is not None and accounting.problem:
        all_notes.append(f"energy accounting: {accounting.problem}")
    return Report(cluster, tuple(series), tuple(all_notes), to)


def _series(stage, name, runs, profiles, accounting, overrides, source) -> Series:
    runs = sorted(runs, key=lambda r: (_gpus(r) is None, _gpus(r) or 0, r.expected.nodes or 0, r.expected.item))
    points = [_point(r) for r in runs]
    scaled = scale(points)
    units = {unit for r in runs if r.metrics is not None and (unit := throughput_of(r.metrics)[1]) is not None}
    notes = []
    if len(units) > 1:
        notes.append(f"the runs report different throughputs ({', '.join(sorted(units))}): compare with care")
    b = baseline_index(points)
    baseline = runs[b].expected.config if b is not None else None
    smallest = runs[0].expected.config if runs else None
    if b is not None and b != 0 and runs[0].missing:
        notes.append(f"baseline {baseline}: the smallest configuration {smallest} has no metrics")
    models = {(m.get("model"), m.get("parameters")) for r in runs if (m := r.metrics) is not None and m.get("model") is not None}
    if len(models) > 1:
        listed = ", ".join(f"{name} ({count or '?'} parameters)" for name, count in sorted(models, key=str))
        notes.append(f"the runs are of different models ({listed}): their scaling is not one workload's")
    for run in runs:
        m = run.metrics or {}
        declared, ran = run.expected.gpus_per_node, number(m.get("devices"))
        if ran is not None and declared is not None and int(ran) != declared:
            notes.append(f"{run.expected.item}: dvc.yaml asks for {declared} GPU(s) per node, the run used {int(ran)}")
    rows = tuple(_row(r, p, s, profiles[r.key], accounting, overrides) for r, p, s in zip(runs, points, scaled, strict=True))
    return Series(name, stage, units.pop() if len(units) == 1 else None, scaling_mode(points), baseline, rows, tuple(notes), source)


_WORKLOAD = (("model", "model"), ("parameters", "parameter count"), ("seq_len", "sequence length"), ("batch_size", "per-device batch"))


def workload_notes(group: Sequence[Series]) -> list[str]:
    """What makes the revisions of one series not the same workload (model, its size, sequence
    length, per-device batch): said once above their side-by-side table, never silently compared."""
    notes = []
    for key, what in _WORKLOAD:
        seen: dict[Any, list[str]] = {}
        for s in group:
            for r in s.rows:
                value = r.metric(key)
                if value is not None:
                    seen.setdefault(value, [])
                    if s.source not in seen[value]:
                        seen[value].append(str(s.source))
        if len(seen) > 1:
            listed = "; ".join(f"{value} ({', '.join(sources)})" for value, sources in seen.items())
            notes.append(f"not the same workload: {what} {listed}")
    return notes


def _gpus(run: Run) -> int | None:
    m = run.metrics or {}
    world = number(m.get("world_size"))
    if world:
        return int(world)
    e = run.expected
    return e.nodes * e.gpus_per_node if e.nodes and e.gpus_per_node else None


def _point(run: Run) -> ScalingPoint:
    m = run.metrics or {}
    throughput = throughput_of(m)[0] if run.metrics is not None else None
    return ScalingPoint(_gpus(run) or 0, throughput, number(m.get("batch_size")), number(m.get("global_batch_size")))


def _device(m: Mapping[str, Any] | None, gpu: Gpu | None) -> str:
    """What produced a run's figures: the device the run itself named (metrics' ``device``),
    else the profile's GPU; CPU where the run says it ran on CPU or nothing says otherwise."""
    if m is not None and m.get("accelerator") == "cpu":
        return "CPU"
    named = m.get("device") if m is not None else None
    if isinstance(named, str) and named.strip() and m is not None and m.get("accelerator") == "gpu":
        return named.strip()[:60]
    if gpu:
        return gpu.model
    return "GPU" if m is not None and m.get("accelerator") == "gpu" else "CPU"


def _row(
    run: Run, point: ScalingPoint, scaled: Scaled, prof: Profile, accounting: energy.Accounting | None, overrides: Overrides
) -> ReportRow:
    m = run.metrics
    gpu = prof.node.gpu
    device = _device(m, gpu)
    if m is None:
        nothing = energy.Energy(None, None, None, ("missing run",))
        em = energy.Emissions(None, None, None, "missing run")
        return ReportRow(run, prof.name, device, _gpus(run), None, scaled, None, {}, None, "missing run", nothing, em)
    breakdown = {k: v for k, raw in sorted(m.items()) if k.startswith("profile_") and (v := number(raw)) is not None}
    breakdown |= _profiled_seconds(m.get("profile"))
    value, note = mfu(m, gpu.peak_tflops_bf16 if gpu and device != "CPU" else None, prof.name)
    elapsed, applies, extra = _elapsed(run, prof, accounting)
    en = _energy(run, prof, device, applies, elapsed, extra)
    em = energy.emissions(en, *_site(prof, overrides))
    cost, cost_note = _cost(run, prof, elapsed, extra)
    return ReportRow(
        run, prof.name, device, _gpus(run), point.throughput, scaled, number(m.get("mean_step_time_s")), breakdown, value, note, en, em,
        cost, prof.site.billing.unit if prof.site.billing else None, cost_note,
    )  # fmt: skip


def _cost(run: Run, prof: Profile, elapsed: float | None, extra: str) -> tuple[float | None, str]:
    """What the site bills for the run's allocation: whole nodes on a whole-node partition, else its GPUs."""
    billing = prof.site.billing
    if billing is None:
        return billing_cost(None, None, None, None, False)
    prov = run.provenance or {}
    name = prov.get("partition") or prof.scheduler.default_partition
    partition = prof.scheduler.partitions.get(name) if isinstance(name, str) else None
    if partition is None:
        return None, f"the partition the job ran on is unknown ({name or 'none recorded'})"
    nodes = number(prov.get("nodes")) or run.expected.nodes
    value, note = billing_cost(billing, int(nodes) if nodes else None, _gpus(run), elapsed, partition.whole_node)
    return value, f"{note}{extra}; {billing.source}"


def _site(prof: Profile, overrides: Overrides) -> tuple[float | None, float | None, str]:
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


def _elapsed(run: Run, prof: Profile, accounting: energy.Accounting | None) -> tuple[float | None, _Accounted, str]:
    """How long the run's job held its allocation (every run of a requeued job where accounting
    lists them, else provenance's last run: ``extra`` says so), and the accounting that
    applies to it (None, with the reason, when none does)."""
    prov = run.provenance or {}
    job_id = prov.get("job_id")
    if prov.get("backend") != "slurm":
        applies = _Accounted(None, f"not a Slurm job (backend {prov.get('backend') or 'unknown'})")
    elif (
        accounting is not None
        and prof.scheduler.cluster_name
        and accounting.cluster_name
        and prof.scheduler.cluster_name != accounting.cluster_name
    ):
        applies = _Accounted(None, f"the job ran on {prof.scheduler.cluster_name}; this is {accounting.cluster_name}'s accounting")
    else:
        applies = _Accounted(accounting, None)
    kept = energy.from_record(prov.get("accounting"), job_id) if prov.get("backend") == "slurm" else None
    if kept is not None and (applies.accounting is None or applies.accounting.problem or job_id not in applies.accounting.jobs):
        # What the job's own cluster said when the job was recorded: a revision from another
        # cluster, or this one's accounting out of reach, still gets every run's time and energy.
        applies = _Accounted(kept, None)
    elapsed: float | None = energy.accounted_elapsed_s(applies.accounting, job_id)
    extra = ""
    if elapsed is None:
        elapsed = number(prov.get("elapsed_s"))
        if elapsed is not None and (prov.get("requeues") or 0) > 0:
            extra = f" (the last of {prov['requeues'] + 1} runs only)"
    return elapsed, applies, extra


@dataclass(frozen=True)
class _Accounted:
    accounting: energy.Accounting | None
    why_not: str | None  # when accounting does not apply to the run


def _energy(run: Run, prof: Profile, device: str, applies: _Accounted, elapsed: float | None, extra: str) -> energy.Energy:
    acct = applies.accounting
    accounted = (None, applies.why_not) if applies.why_not else energy.from_accounting(acct, (run.provenance or {}).get("job_id"))
    sampled = energy.from_samples(run.metrics)
    power = prof.node.gpu.power_w if prof.node.gpu and device != "CPU" else None
    joules, note = energy.estimate(power, _gpus(run), elapsed)
    return energy.choose(accounted, sampled, (joules, note + extra), acct.plugin if acct else None)


def metrics_of(report: Report) -> dict[str, dict[str, Any]]:
    """Per item, what the report computed (the report's own DVC metrics file)."""
    out = {}
    for s in report.series:
        for r in s.rows:
            out[r.run.key] = {
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
                **({"cost": r.cost, "cost_unit": r.cost_unit} if r.cost_unit else {}),
            }
    return out
