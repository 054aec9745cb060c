"""Energy and emissions of a job, from the best source that has a value.

Three sources, in this order; the first with a value wins and is named in
``energy_source``:

``accounting``
    Slurm's ``ConsumedEnergyRaw`` (joules) for the job's allocation, summed over
    every run of a requeued job (``sacct -X -D``). Counted only when the cluster
    has an energy plugin (``scontrol show config``: ``AcctGatherEnergyType`` other
    than ``acct_gather_energy/none``) and every run recorded more than 0 J. Slurm
    prints 0 or nothing when no plugin gathered energy (the testbed, and many
    clusters), and no job runs on 0 J, so 0 means "not recorded", never "free".
    What it covers depends on the plugin (:data:`PLUGIN_SCOPES`): the GPUs
    (``gpu``; ``rsmi`` on older Slurm), CPU sockets and memory (``rapl``), or whole
    nodes (``ipmi``, ``pm_counters`` on HPE Cray, ``xcc``).
``sampled``
    The GPUs' energy measured by the training itself while it ran
    (``experiments/common/power.py`` writes ``gpu_energy_j``, summed over the ranks, and
    ``power_source``). GPUs only, and only while the training loop ran.
``estimate``
    The profile's device power (``node.gpu.power_w``, a board power limit) x
    GPU-hours (elapsed time x GPUs). An estimate, marked as one; it leans high,
    since training rarely draws the full limit.

Then ``energy_kwh = J / 3.6e6`` and ``emissions_kg = kWh x PUE x g CO2e/kWh / 1000``,
PUE and carbon intensity from the profile's ``site`` (or the report's options).
Nothing is ever filled with 0: a value that cannot be known is None, with a note
saying why.

Querying Slurm goes through a :class:`~orchestrator.util.runner.Runner`
(:func:`query_accounting`); everything else here is pure and tested on captured text.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.slurm import commands
from orchestrator.slurm import config as slurm_config
from orchestrator.util.runner import Runner

JOULES_PER_KWH = 3.6e6
Source = Literal["accounting", "sampled", "estimate"]

# JobID: an array task is listed as <array>_<index>, as the ledger names it (see slurm.commands).
SACCT_ENERGY_FIELDS = ("JobID", "State", "ElapsedRaw", "ConsumedEnergyRaw")
# What an acct_gather_energy plugin measures (the part after "acct_gather_energy/").
PLUGIN_SCOPES: Mapping[str, str] = {
    "gpu": "gpu",
    "rsmi": "gpu",
    "rapl": "cpu",
    "ipmi": "node",
    "pm_counters": "node",
    "xcc": "node",
}


# --- accounting ------------------------------------------------------------------


@dataclass(frozen=True)
class JobRun:
    """One run of a job as sacct lists it (a requeued job has several)."""

    state: str
    elapsed_s: int | None
    energy_j: int | None  # ConsumedEnergyRaw; None when sacct printed nothing


@dataclass(frozen=True)
class Accounting:
    """What this cluster's accounting says: its energy plugin and the jobs' runs."""

    plugin: str | None  # AcctGatherEnergyType, e.g. acct_gather_energy/pm_counters
    cluster_name: str | None  # Slurm's ClusterName, so results from elsewhere are not looked up here
    jobs: Mapping[str, tuple[JobRun, ...]]
    problem: str | None = None  # why nothing could be asked (no sacct here, sacct failed)

    @property
    def records_energy(self) -> bool:
        return plugin_records(self.plugin)


def sacct_energy_argv(job_ids: Iterable[str]) -> list[str]:
    # -X: the allocation's line (its ConsumedEnergyRaw is the job's energy TRES, all nodes);
    # -D: every run of a requeued job, each with its own energy and elapsed time.
    return ["sacct", "-X", "-D", "-n", "-P", "-j", ",".join(commands.asked(job_ids)), f"--format={','.join(SACCT_ENERGY_FIELDS)}"]


def parse_sacct_energy(text: str) -> dict[str, tuple[JobRun, ...]]:
    """Runs per job from ``sacct -X -D -n -P --format=<SACCT_ENERGY_FIELDS>``, oldest first."""
    jobs: dict[str, list[JobRun]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != len(SACCT_ENERGY_FIELDS):
            continue
        job_id, state, elapsed, energy = (p.strip() for p in parts)
        if "[" in job_id:
            continue  # an array's tasks that have not started: no run, no energy
        jobs.setdefault(job_id, []).append(
            JobRun(state=state, elapsed_s=int(elapsed) if elapsed.isdigit() else None, energy_j=int(energy) if energy.isdigit() else None)
        )
    return {k: tuple(v) for k, v in jobs.items()}


def plugin_records(plugin: str | None) -> bool:
    """Whether an AcctGatherEnergyType gathers energy at all (``.../none`` and ``(null)`` do not)."""
    return plugin is not None and plugin not in ("", "(null)") and not plugin.endswith("/none")


def plugin_scope(plugin: str | None) -> str:
    name = (plugin or "").rsplit("/", 1)[-1]
    return PLUGIN_SCOPES.get(name, "unknown")


def query_accounting(runner: Runner, job_ids: Sequence[str]) -> Accounting:
    """One ``scontrol show config`` and one ``sacct`` for all ``job_ids`` (side effects here only)."""
    if runner.which("sacct") is None or runner.which("scontrol") is None:
        return Accounting(None, None, {}, problem="no Slurm accounting here (sacct or scontrol not found)")
    config, problem = slurm_config.read(runner)
    if config is None:
        return Accounting(None, None, {}, problem=problem)
    plugin, cluster = config.get("AcctGatherEnergyType"), config.get("ClusterName")
    if not job_ids:
        return Accounting(plugin, cluster, {})
    try:
        done = runner.run(sacct_energy_argv(job_ids), timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Accounting(None, None, {}, problem=f"Slurm did not answer: {exc}")
    if done.returncode != 0:
        return Accounting(plugin, cluster, {}, problem=f"`{' '.join(done.argv)}` failed: {done.stderr.strip() or done.returncode}")
    return Accounting(plugin, cluster, parse_sacct_energy(done.stdout))


def from_accounting(accounting: Accounting | None, job_id: str | None) -> tuple[float | None, str]:
    """The job's energy in J from accounting, or None, and a note saying why either way."""
    if accounting is None:
        return None, "accounting not asked"
    if accounting.problem:
        return None, accounting.problem
    if not accounting.records_energy:
        return None, f"the cluster records no energy (AcctGatherEnergyType={accounting.plugin or 'unset'}; sacct's 0 means not recorded)"
    runs = accounting.jobs.get(job_id or "")
    if not runs:
        return None, f"sacct knows no job {job_id}"
    if any(r.energy_j is None or r.energy_j <= 0 for r in runs):
        return None, f"{accounting.plugin} recorded no energy for job {job_id} (0 or empty in sacct)"
    total = sum(r.energy_j for r in runs if r.energy_j)
    runs_note = f" over {len(runs)} runs" if len(runs) > 1 else ""
    return float(total), f"sacct ConsumedEnergyRaw of job {job_id}{runs_note} ({accounting.plugin})"


def accounted_elapsed_s(accounting: Accounting | None, job_id: str | None) -> int | None:
    """The job's elapsed time over all its runs, when accounting lists every run."""
    runs = accounting.jobs.get(job_id or "") if accounting else None
    if not runs or any(r.elapsed_s is None for r in runs):
        return None
    return sum(r.elapsed_s for r in runs if r.elapsed_s is not None)


# What a job's states read like while it has not ended (its accounting is not final yet).
_NOT_ENDED = ("PENDING", "RUNNING", "REQUEUED", "COMPLETING", "SUSPENDED", "RESIZING", "STAGE_OUT", "SIGNALING")


def to_record(accounting: Accounting, job_id: str | None) -> dict[str, Any] | None:
    """What accounting says of one ended job, kept in its provenance: the report reads it where
    this cluster's accounting cannot be asked (results from another cluster, compared by
    revision; sacct's records purged). None when accounting has nothing final to say."""
    runs = accounting.jobs.get(job_id or "")
    if accounting.problem or not runs or (runs[-1].state.split() or [""])[0] in _NOT_ENDED:  # earlier runs read REQUEUED
        return None
    return {
        "cluster": accounting.cluster_name,
        "plugin": accounting.plugin,
        "runs": [{"state": r.state, "elapsed_s": r.elapsed_s, "energy_j": r.energy_j} for r in runs],
    }


def from_record(data: Any, job_id: str | None) -> Accounting | None:
    """The accounting a provenance kept for ``job_id`` (:func:`to_record`), or None."""
    if not isinstance(data, dict) or not job_id or not isinstance(data.get("runs"), list):
        return None
    runs = []
    for r in data["runs"]:
        if not isinstance(r, dict):
            return None
        elapsed, energy = r.get("elapsed_s"), r.get("energy_j")
        runs.append(
            JobRun(
                state=str(r.get("state", "")),
                elapsed_s=elapsed if isinstance(elapsed, int) else None,
                energy_j=energy if isinstance(energy, int) else None,
            )
        )
    plugin, cluster = data.get("plugin"), data.get("cluster")
    return Accounting(plugin if isinstance(plugin, str) else None, cluster if isinstance(cluster, str) else None, {job_id: tuple(runs)})


# --- sampled and estimated ---------------------------------------------------------


def from_samples(metrics: Mapping[str, Any] | None) -> tuple[float | None, str]:
    """The GPUs' energy the run measured itself (``gpu_energy_j``), or None and why."""
    if metrics is None:
        return None, "no metrics"
    source = metrics.get("power_source")
    value = metrics.get("gpu_energy_j")
    if source is None and value is None:
        return None, "the run did not sample GPU power (no gpu_energy_j in its metrics)"
    if source == "none" or not isinstance(value, (int, float)) or isinstance(value, bool):
        return None, f"the run sampled no GPU power (power_source {source or 'missing'})"
    if value <= 0:
        return None, f"the run's GPU energy is {value} J ({source}): not a measurement"
    return float(value), f"GPU energy sampled during the run ({source})"


def estimate(power_w: float | None, gpus: int | None, elapsed_s: float | None) -> tuple[float | None, str]:
    """Board power x GPUs x elapsed time (J), or None and why."""
    if power_w is None:
        return None, "the profile gives no device power (node.gpu.power_w) to estimate from"
    if not gpus:
        return None, "no GPU count to estimate from"
    if elapsed_s is None:
        return None, "no elapsed time to estimate from"
    return power_w * gpus * elapsed_s, f"estimate: {power_w:g} W x {gpus} GPU(s) x {elapsed_s:g} s (board power limit: leans high)"


@dataclass(frozen=True)
class Energy:
    joules: float | None
    source: Source | None
    scope: str | None  # "gpu", "cpu", "node" (what the joules cover), or "unknown"
    notes: tuple[str, ...]  # the chosen source's note last, after why earlier ones had nothing

    @property
    def kwh(self) -> float | None:
        return None if self.joules is None else self.joules / JOULES_PER_KWH

    @property
    def note(self) -> str:
        return "; ".join(self.notes)


def choose(
    accounted: tuple[float | None, str], sampled: tuple[float | None, str], estimated: tuple[float | None, str], plugin: str | None
) -> Energy:
    """The first source with a value, in the module's order."""
    notes: list[str] = []
    ordered: list[tuple[Source, tuple[float | None, str], str | None]] = [
        ("accounting", accounted, plugin_scope(plugin)),
        ("sampled", sampled, "gpu"),
        ("estimate", estimated, "gpu"),
    ]
    for source, (joules, note), scope in ordered:
        notes.append(note)
        if joules is not None:
            return Energy(joules, source, scope, tuple(notes))
    return Energy(None, None, None, tuple(notes))


# --- emissions -----------------------------------------------------------------------


@dataclass(frozen=True)
class Emissions:
    kg: float | None
    pue: float | None
    carbon_intensity_g_per_kwh: float | None
    note: str  # where PUE and intensity come from, or why there are no emissions


def emissions(energy: Energy, pue: float | None, carbon_g_per_kwh: float | None, where: str) -> Emissions:
    """kWh x PUE x g/kWh, in kg; ``where`` names the source of PUE and intensity."""
    missing = [name for name, v in (("PUE", pue), ("carbon intensity", carbon_g_per_kwh)) if v is None]
    if missing or pue is None or carbon_g_per_kwh is None:  # (the same test, said so the types narrow)
        return Emissions(
            None, pue, carbon_g_per_kwh, f"no {' or '.join(missing)}: set the profile's site section or pass --pue/--carbon-intensity"
        )
    if energy.kwh is None:
        return Emissions(None, pue, carbon_g_per_kwh, f"no energy; PUE and intensity from {where}")
    return Emissions(energy.kwh * pue * carbon_g_per_kwh / 1000, pue, carbon_g_per_kwh, where)


def as_metrics(energy: Energy, em: Emissions) -> dict[str, Any]:
    """The metrics the report writes (None where a value is not known; the notes go to its pages)."""
    return {
        "energy_kwh": energy.kwh,
        "energy_source": energy.source,
        "energy_scope": energy.scope,
        "pue": em.pue,
        "carbon_intensity_g_per_kwh": em.carbon_intensity_g_per_kwh,
        "emissions_kg": em.kg,
    }
