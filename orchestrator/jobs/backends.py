"""Backends: how a rendered script becomes a running job, behind one small interface.

* :class:`ProcessBackend` runs the script as a child process: the ``local`` form
  on this machine, and the blocking ``srun`` form (srun allocates and waits
  inside the script).
* :class:`SbatchBackend` submits the ``sbatch`` form and follows the job with
  one ``sacct`` query for all jobs per poll (``squeue`` when accounting lags), through
  the one :class:`~orchestrator.slurm.client.SlurmClient`, whose errors
  (:class:`SchedulerError`, :class:`SchedulerUnreachable`, :class:`Refused`) it raises.

Every command, and the local child process, goes through a
:class:`~orchestrator.util.runner.Runner`.
"""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from orchestrator.jobs import ledger
from orchestrator.scripts import cluster_checks
from orchestrator.scripts.plan import Plan
from orchestrator.slurm import commands
from orchestrator.slurm import config as slurm_config
from orchestrator.slurm.client import Refused, SchedulerError, SchedulerUnreachable, SlurmClient
from orchestrator.slurm.states import JobInfo, State
from orchestrator.util.runner import Process, Runner

__all__ = ["Accepted", "Backend", "ProcessBackend", "Refused", "SbatchBackend", "SchedulerError", "SchedulerUnreachable", "preflight"]


@dataclass(frozen=True)
class Accepted:
    """A backend's answer to a submission: the job it made and where its log goes."""

    job_id: str
    log: str  # relative to the workspace


class Backend(Protocol):
    name: str

    def preflight(self, plan: Plan) -> list[str]: ...

    def submit(self, plan: Plan, script: Path, after: Sequence[str] = (), exclude: Sequence[str] = ()) -> Accepted: ...

    def find(self, intent: ledger.Intent) -> str | None: ...

    def unhealthy(self, nodes: Sequence[str]) -> list[str]: ...

    def exclude(self, job_id: str, nodes: Sequence[str]) -> bool: ...

    def query(self, job_ids: Sequence[str]) -> dict[str, JobInfo]: ...

    def pause(self, job_id: str, seconds: float, sleep: Callable[[float], None]) -> None:
        """Wait before the next look at ``job_id``: ``sleep(seconds)``, or less where the
        backend hears of the job's end by itself."""
        ...

    def cancel(self, job_ids: Sequence[str]) -> None: ...


class ProcessBackend:
    """Runs the script as our child; the job lives as long as this process."""

    def __init__(self, root: Path, runner: Runner, name: str = "local") -> None:
        self.root = root
        self.runner = runner
        self.name = name
        self._children: dict[str, Process] = {}
        self._started: dict[str, float] = {}

    def preflight(self, plan: Plan) -> list[str]:
        return []

    def submit(self, plan: Plan, script: Path, after: Sequence[str] = (), exclude: Sequence[str] = ()) -> Accepted:
        if after:
            raise ValueError("a process backend runs jobs one at a time; it cannot wait for others")
        # ``exclude`` means nothing here: the script runs where we are (or srun picks).
        # Output goes to our stdout/stderr (DVC shows it); the script tees a log itself.
        child = self.runner.spawn(["bash", str(script)], cwd=self.root)
        job_id = f"{self.name}-{child.pid}"
        self._children[job_id] = child
        self._started[job_id] = time.monotonic()
        return Accepted(job_id, plan.log.replace("%j", "local" if self.name == "local" else "%j"))

    def query(self, job_ids: Sequence[str]) -> dict[str, JobInfo]:
        found = {}
        for job_id in job_ids:
            child = self._children.get(job_id)
            if child is None:
                # Not ours: a process of an earlier run of the orchestrator.
                pid = int(job_id.rsplit("-", 1)[-1])
                alive = _pid_alive(pid)
                found[job_id] = JobInfo(job_id, State.RUNNING if alive else State.UNKNOWN, "process")
                continue
            rc = child.poll()
            elapsed = int(time.monotonic() - self._started[job_id])
            if rc is None:
                found[job_id] = JobInfo(job_id, State.RUNNING, "process", elapsed_s=elapsed)
            else:
                state = State.COMPLETED if rc == 0 else State.FAILED
                found[job_id] = JobInfo(job_id, state, "process", exit_code=rc, elapsed_s=elapsed, nodes=1, nodelist=socket.gethostname())
        return found

    def pause(self, job_id: str, seconds: float, sleep: Callable[[float], None]) -> None:
        # Our own child: its end wakes us at once. Polled, a quick local run was noticed up to a
        # third of its time late (the waits grow by half each), at every stage of `dvc repro`.
        child = self._children.get(job_id)
        if child is None:
            sleep(seconds)
            return
        try:
            child.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            pass

    def find(self, intent: ledger.Intent) -> str | None:
        return None  # a child dies with the process that started it: nothing to adopt

    def unhealthy(self, nodes: Sequence[str]) -> list[str]:
        return []

    def exclude(self, job_id: str, nodes: Sequence[str]) -> bool:
        return False

    def cancel(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            child = self._children.get(job_id)
            if child and child.poll() is None:
                child.terminate()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SbatchBackend:
    name = "slurm"

    def __init__(self, root: Path, runner: Runner, cluster_name: str | None) -> None:
        self.root = root
        self.runner = runner
        self.cluster_name = cluster_name
        self.client = SlurmClient(runner)
        self._checked: set[tuple[str | None, str | None]] = set()
        self._named: dict[tuple[str, str, str], list[str]] = {}  # find()'s answers, until the next sbatch

    def preflight(self, plan: Plan) -> list[str]:
        """What would make the cluster refuse the job, or the job fail to start, found before submitting it."""
        key = (plan.account, plan.partition)
        if key not in self._checked:
            problems = preflight(self.runner, self.cluster_name, plan.account)
            if problems:
                return problems
            self._checked.add(key)
        # Per item (items may name different images), once Slurm answered as the profile's cluster:
        # this is then its login node, which sees the file system the image lives on.
        image = cluster_checks.missing_image(plan, getpass.getuser())
        return [image] if image else []

    def submit(self, plan: Plan, script: Path, after: Sequence[str] = (), exclude: Sequence[str] = ()) -> Accepted:
        job_id = self.sbatch(script, plan.workspace, plan.item, after, exclude)
        return Accepted(job_id, plan.log.replace("%j", job_id))

    def sbatch(self, script: Path, workdir: str, what: str, after: Sequence[str] = (), exclude: Sequence[str] = ()) -> str:
        """Submit ``script`` to run in ``workdir``; the job id. :class:`Refused`, naming
        ``what``, when sbatch says no."""
        self._named.clear()
        return self.client.submit(script, workdir, what, after, exclude)

    def query(self, job_ids: Sequence[str]) -> dict[str, JobInfo]:
        """One sacct call for all jobs; squeue fills in jobs sacct does not list yet (see :meth:`SlurmClient.query`)."""
        return self.client.query(job_ids)

    def pause(self, job_id: str, seconds: float, sleep: Callable[[float], None]) -> None:
        sleep(seconds)  # Slurm tells no one: asked again after the wait

    def find(self, intent: ledger.Intent) -> str | None:
        """The job a killed submission left behind: called ``intent.job_name``, in
        ``intent.workdir``, not yet recorded. Only submissions holding the item's
        lock make such jobs, so the newest match is the one (for an array's task, the
        array: see :attr:`ledger.Intent.array_index`). Both squeue (jobs Slurm
        holds, at once) and sacct (jobs already ended) are asked; if neither answers,
        SchedulerError: submitting blind could make a duplicate."""
        user = getpass.getuser()
        # An hour back: login node and controller clocks may disagree a little.
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(intent.written_at - 3600))
        key = (intent.job_name, os.path.normpath(intent.workdir), since)
        found = self._named.get(key)
        if found is None:
            answered, found = False, []
            for argv in (commands.squeue_named_argv(user, intent.job_name), commands.sacct_named_argv(user, intent.job_name, since)):
                done = self.client.run(argv)
                if done.returncode == 0:
                    answered = True
                    found += [job for job, workdir in commands.parse_named(done.stdout) if os.path.normpath(workdir) == key[1]]
            if not answered:
                raise SchedulerUnreachable(
                    "cannot tell whether an interrupted submission reached Slurm: squeue and sacct both failed",
                    hints=["run again when the controller answers"],
                )
            # The members of one array share its name: one question for all of them.
            self._named[key] = found
        known = {commands.array_of(j) for j in intent.known}
        fresh = sorted({j for j in found if j not in known}, key=int)
        return fresh[-1] if fresh else None

    def unhealthy(self, nodes: Sequence[str]) -> list[str]:
        """Those of ``nodes`` Slurm calls down, drained or failing (none if it does not answer)."""
        if not nodes:
            return []
        try:
            done = self.client.run(commands.sinfo_nodes_argv(nodes))
        except SchedulerError:
            return []
        return commands.parse_unhealthy(done.stdout) if done.returncode == 0 else []

    def exclude(self, job_id: str, nodes: Sequence[str]) -> bool:
        """Keep the (requeued, pending) job off ``nodes``; False if Slurm said no."""
        try:
            return (
                self.client.run(
                    commands.exclude_argv(job_id, nodes),
                ).returncode
                == 0
            )
        except SchedulerError:
            return False

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.client.cancel(job_ids)


def preflight(runner: Runner, cluster_name: str | None, account: str | None) -> list[str]:
    """Controller reachable, ClusterName as the profile expects, account known."""
    try:
        ping = runner.run(["scontrol", "ping"], timeout=30)
    except FileNotFoundError:
        return ["scontrol is not installed here: Slurm profiles need a Slurm login node (or use --cluster local)"]
    except subprocess.TimeoutExpired:
        return ["the Slurm controller did not answer `scontrol ping` within 30 s"]
    if ping.returncode != 0 or "DOWN" in ping.stdout:
        return [f"the Slurm controller is unreachable: {(ping.stdout + ping.stderr).strip()}"]
    problems = []
    if cluster_name:
        config, _ = slurm_config.read(runner)
        actual = config.get("ClusterName") if config else None
        if actual and actual != cluster_name:
            problems.append(f"this Slurm's ClusterName is {actual!r}, but the profile is for {cluster_name!r}: pick the matching --cluster")
    if account:
        user = getpass.getuser()
        assoc = runner.run(["sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={user}", "format=account"], timeout=30)
        if assoc.returncode == 0:
            accounts = sorted({a.strip() for a in assoc.stdout.split() if a.strip()})
            if accounts and account not in accounts:
                problems.append(f"account {account!r} is not one of {user}'s accounts on this cluster: {', '.join(accounts)}")
    return problems
