"""``orchestrator smoke``: one two-minute job per job shape, before the sweep.

The plans are :mod:`orchestrator.scripts.smoke`'s (pure); this module does the rest: it writes
the probe, each shape's script and expectations under ``.orchestrator/smoke/``, submits the jobs
(as many at once as the site's MaxSubmitJobs leaves room for), waits for them with the shared
poller, reads each rank's result and keeps each shape's verdict
(:mod:`~orchestrator.jobs.smoke_verdicts`). It writes nothing else: no item's outputs, no ledger
entry, no dvc.lock.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import OrchestratorError, PlanError
from orchestrator.jobs import backends, smoke_verdicts
from orchestrator.jobs.smoke_verdicts import SmokeVerdict
from orchestrator.pipeline import stages
from orchestrator.scripts import smoke
from orchestrator.scripts.plan import Plan
from orchestrator.scripts.smoke import SMOKE_DIR, Shape, SmokeJob
from orchestrator.scripts.workspace import Workspace
from orchestrator.slurm import limits
from orchestrator.slurm.client import SchedulerError, SlurmClient
from orchestrator.slurm.states import JobInfo
from orchestrator.util import files
from orchestrator.util.poll import Backoff, Clock, Poller
from orchestrator.util.runner import Runner

PROBE_SOURCE = Path(__file__).with_name("smoke_probe.py")
SCRIPT_NAME = "smoke.sbatch"
# A job sacct and squeue have not listed this long after its submission is judged without them.
_UNLISTED_S = 300.0


@dataclass(frozen=True)
class Planned:
    ws: Workspace
    jobs: tuple[SmokeJob, ...]


def plan(root: Path, cluster: str | None, runner: Runner, targets: Sequence[str] = (), partition: str | None = None) -> Planned:
    """Every shape's smoke job; PlanError listing every item or shape that cannot be planned."""
    stages.require_pipeline(root)
    ws = Workspace.open(root, cluster, runner)
    p = ws.profile.profile
    if not p.uses_slurm:
        raise OrchestratorError(
            f"smoke jobs are Slurm jobs, and profile {p.name!r} has no Slurm (scheduler.kind: none)",
            hints=["pick a Slurm profile with --cluster (`orchestrator clusters` lists them), or run `dvc repro` here"],
        )
    if partition is not None and partition not in p.scheduler.partitions:
        raise OrchestratorError(f"--partition {partition!r} is not one of {p.name}'s: {', '.join(p.scheduler.partitions)}")
    found, problems = stages.jobs(ws.items(targets))
    if not targets:
        ws.know(found)
    real = [(job, ws.plan(job)) for job in found]
    problems += [(job.item.name, msg) for job, plan_ in real for msg in plan_.problems]
    if problems:
        listed = [f"{who}: {msg}" for who, msg in problems]
        raise PlanError(f"cannot plan the pipeline for cluster {ws.cluster!r}: no smoke job was submitted", listed)
    if not real:
        which = f"none of {' '.join(targets)} is" if targets else "no item of dvc.yaml is"
        raise PlanError(f"{which} an orchestrated item (its cmd starting `orchestrator run`): there is nothing to smoke-test")
    jobs = tuple(_smoke_job(ws, shape, members) for shape, members in smoke.group(real, partition or p.scheduler.smoke_partition))
    bad = [f"{j.shape.label}: {msg}" for j in jobs for msg in j.plan.problems]
    if bad:
        raise PlanError(
            f"cannot plan the smoke jobs for cluster {ws.cluster!r}: none was submitted",
            bad,
            hints=[f"--partition NAME sends them elsewhere (the profile's: {', '.join(p.scheduler.partitions)})"],
        )
    return Planned(ws, jobs)


def _smoke_job(ws: Workspace, shape: Shape, members: Sequence[stages.Job]) -> SmokeJob:
    device = None if members[0].spec.cpus is not None else ws.device(members[0])
    return smoke.smoke_job(shape, members, ws.profile, ws.params.settings, ws.absolute_root, device)


def run(
    planned: Planned,
    runner: Runner,
    say: Callable[[str], None] = print,
    clock: Clock | None = None,
) -> list[SmokeVerdict]:
    """Submit every smoke job, wait for them all and judge each; the verdicts, in the jobs' order."""
    clock = clock or Clock()
    ws, jobs = planned.ws, planned.jobs
    backend = backends.SbatchBackend(ws.root, runner, ws.profile.profile.scheduler.cluster_name)
    secrets = sorted({name for job in jobs for name in job.plan.secrets if not os.environ.get(name)})
    problems = [f"secret {name} (orchestrator.secrets) is not set in this environment: export it before submitting" for name in secrets]
    problems += list(dict.fromkeys(p for job in jobs for p in backend.preflight(job.plan)))
    if problems:
        raise SchedulerError(f"cannot submit the smoke jobs to {ws.cluster}: none was submitted", problems)
    room = _room(ws, jobs, runner)
    _write(ws.root, jobs)
    client = SlurmClient(runner)
    waiting = list(jobs)
    ids: dict[str, SmokeJob] = {}
    submitted_at: dict[str, float] = {}
    verdicts: dict[str, SmokeVerdict] = {}
    try:
        poller = Poller(Backoff.from_environment(2.0, 1.5, 15.0), clock=clock)
        while True:
            while waiting and len(ids) - len(verdicts) < room:
                job = waiting.pop(0)
                job_id = client.submit(Path(job.folder) / SCRIPT_NAME, ws.absolute_root, f"the smoke job of {job.shape.label}")
                ids[job_id], submitted_at[job_id] = job, clock.now()
                say(f"submitted smoke job {job_id}: {job.shape.label} ({len(job.items)} item(s), e.g. {job.item})")
            active = [j for j in ids if j not in verdicts]
            if not active and not waiting:
                break
            infos = client.query(active)
            for job_id in active:
                info = infos.get(job_id)
                if info is not None and not info.state.final:
                    continue
                if info is None and clock.now() - submitted_at[job_id] < _UNLISTED_S:
                    continue
                verdicts[job_id] = v = _judge(ws.root, ids[job_id], job_id, info, clock.now())
                smoke_verdicts.save(ws.root, v)
                say(f"smoke job {job_id} ended: {v.shape}: {'passed' if v.passed else 'failed'}")
            if len(verdicts) < len(ids) or waiting:
                poller.sleep()
    except KeyboardInterrupt:
        left = [j for j in ids if j not in verdicts]
        client.cancel(left)
        raise OrchestratorError(f"interrupted: cancelled smoke job(s) {', '.join(left) or '(none running)'}") from None
    order = {job.shape.key: i for i, job in enumerate(jobs)}
    return sorted(verdicts.values(), key=lambda v: order[v.key])


def line(v: SmokeVerdict) -> str:
    status = "passed" if v.passed else "FAILED"
    log = f"; log: {v.log}" if v.log and not v.passed else ""
    return f"{status}: {v.shape}: {v.message} (job {v.job_id}){log}"


def _room(ws: Workspace, jobs: Sequence[SmokeJob], runner: Runner) -> int:
    """How many smoke jobs may be queued at once: all of them, unless the site's MaxSubmitJobs
    leaves less room (the rest follow as those end); SchedulerError when it leaves none."""
    parts = ws.profile.profile.scheduler.partitions
    qos = {part.qos if (part := parts.get(j.plan.partition or "")) else None for j in jobs}
    found = [
        limit for q in sorted(qos, key=str) for limit in limits.submit_limits(runner, getpass.getuser(), ws.params.settings.account, q)
    ]
    tight = min(found, key=lambda limit: limit.room, default=None)
    if tight is None or tight.room >= len(jobs):
        return len(jobs)
    if tight.room < 1:
        raise SchedulerError(
            f"{tight.what} allows {tight.limit} queued or running jobs (MaxSubmitJobs) and {tight.queued} are: no smoke job was submitted",
            hints=["run again when some of your jobs have ended"],
        )
    return tight.room


def _write(root: Path, jobs: Sequence[SmokeJob]) -> None:
    """The probe, and each shape's script and expectations; earlier results cleared."""
    files.write_if_changed(root / SMOKE_DIR / smoke.PROBE_FILE, PROBE_SOURCE.read_text())
    for job in jobs:
        folder = Path(job.folder)
        shutil.rmtree(job.expect.results, ignore_errors=True)
        files.write_if_changed(folder / "expect.json", json.dumps(job.expect.to_json(), indent=1) + "\n")
        files.write_if_changed(folder / SCRIPT_NAME, job.script, mode=0o755)
        # Slurm opens the log before the script runs: its folder must exist.
        files.make_dirs((root / job.plan.log).parent)


def _judge(root: Path, job: SmokeJob, job_id: str, info: JobInfo | None, at: float) -> SmokeVerdict:
    ranks: dict[int, dict] = {}
    for path in Path(job.expect.results).glob("rank-*.json"):
        try:
            data = json.loads(path.read_text())
            ranks[int(data["rank"])] = data
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a rank that wrote no whole result is named as missing
    log = job.plan.log.replace("%j", job_id)
    return smoke_verdicts.judge(job, job_id, info, ranks, log, at)


def summary_line(ws: Workspace, plans: dict[str, Plan]) -> str | None:
    """``submit``'s line on the smoke tests of the items it submits (``plans``: their real plans)."""
    p = ws.profile.profile
    if not p.uses_slurm or not plans:
        return None
    real = [(ws.jobs[name], plan_) for name, plan_ in plans.items() if name in ws.jobs]
    shapes = []
    for shape, members in smoke.group(real, p.scheduler.smoke_partition):
        last = smoke_verdicts.load(ws.root, shape.key)
        # The digest of the script the verdict's own item gives now (items of a shape may differ in their deps).
        first = [m for m in members if last and m.item.name == last.item] or list(members)
        if last and last.item != first[0].item.name and last.item in ws.jobs:
            first = [ws.jobs[last.item]]
        shapes.append((shape, _smoke_job(ws, shape, first).digest))
    return smoke_verdicts.summary(ws.root, shapes, time.time)
