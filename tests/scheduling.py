"""How the suite runs in parallel (pytest-xdist, `--dist loadgroup`, tests/run.sh): each test's
markers, its xdist group, the order the groups are handed out in, and the lock that lets the Slurm
testbed's tests share the cluster. conftest.py's hooks call these.

- **Markers** follow from what a test needs, so none slips past `tests/run.sh --fast`
  (-m "not slurm and not apptainer and not ssh"): its folder under integration/, and the fixtures
  that bring a real component up, used directly or through another fixture.
- **Groups.** The tests of one daemon run one after another on one worker: Apptainer's, sshd's,
  and the testbed's in four groups (TESTBED_GROUPS), since they mostly wait for Slurm. A module
  with a module fixture is a group too, so the fixture is set up once; modules that share a
  session fixture name one group themselves (xdist_group: the LM runs, trained.LM_RUNS_GROUP).
- **Order.** The longest chains are handed out first: a chain started last keeps one worker busy
  while the others have finished.
- **Priority.** A test that needs no daemon runs at a lower CPU priority (nice 5: a third of the
  share), with the processes it starts: the daemons' groups are the longest chains, and their
  Slurm jobs (at the daemons' priority) wait for CPU the other workers' tests would take (a 2-core
  machine is busy throughout the whole suite); the other tests have the rest of the run to finish in.
- **The testbed's lock** (Turn). Testbed tests on different workers each submit from their own
  folder and read back only their own jobs; one marked testbed_exclusive changes the whole cluster
  (a node set down, the controller stopped, both nodes kept busy) and has it alone.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest
from support import LOCKS, ROOT

# Each is also a folder under integration/. The first of them a test has names its group: a Slurm
# job in a container is the testbed's.
DAEMON_MARKS = ("slurm", "apptainer", "ssh")
MARK_BY_FIXTURE = {"slurm_testbed": "slurm", "apptainer": "apptainer", "ci_image": "apptainer", "sshd": "ssh"}

# The testbed's modules by group, balanced by their measured times (--durations, CI=true, 2 cores,
# 7 to 0.1 minutes each). The exclusive tests' modules are all in one group, whose exclusive tests
# run last in it, as one block (~150 s): the other groups wait for it at most once (run first, it
# kept them waiting at their start). Four groups, each ~13 minutes of mostly waiting for Slurm, so
# the testbed's work, the block included, ends minutes before the CPU-bound tests without a daemon
# do: with three (~17 minutes each) the block ran last of everything, on a machine gone idle.
TESTBED_GROUPS = {
    "slurm": frozenset({"test_slurm_testbed.py", "test_report_two_clusters_testbed.py", "test_ranks_testbed.py"}),
    "slurm-2": frozenset(
        {
            "test_docs_commands_testbed.py", "test_limits_testbed.py", "test_remote_submit.py", "test_container_jobs.py",
            "test_remote_install.py", "test_workstation_rounds.py",
        }
    ),
    "slurm-3": frozenset(
        {
            "test_arrays_testbed.py", "test_faults_testbed.py", "test_stuck_testbed.py", "test_testbed_cluster.py",
            "test_secrets.py", "test_energy_accounting.py", "test_executor_on_slurm.py", "test_record_testbed.py",
            "test_cluster_switch_testbed.py", "test_remote_container_build.py", "test_fresh_project_testbed.py",
            "test_requests_testbed.py", "test_smoke_testbed.py",
        }
    ),
    "slurm-4": frozenset(
        {"test_lm_testbed.py", "test_experiments_testbed.py", "test_docs_commands_ssh.py", "test_remote_workflow.py"}
    ),
}  # fmt: skip
EXCLUSIVE_GROUP = "slurm-3"
DAEMON_GROUPS = frozenset({*TESTBED_GROUPS, "apptainer", "ssh"})


def arrange(items: list) -> None:
    """Mark and group every test, then put them in the order xdist hands the groups out
    (collection order: --no-loadscope-reorder)."""
    for item in items:
        parts = Path(item.path).relative_to(ROOT / "tests").parts
        wanted = {parts[1]} if len(parts) > 2 and parts[0] == "integration" and parts[1] in DAEMON_MARKS else set()
        wanted |= {mark for fixture, mark in MARK_BY_FIXTURE.items() if fixture in item.fixturenames}
        for mark in sorted(wanted - {m.name for m in item.iter_markers()}):
            item.add_marker(mark)
        group = next((mark for mark in DAEMON_MARKS if item.get_closest_marker(mark)), None)
        if group == "slurm":
            group = testbed_group(Path(item.path).name)
        if group is None and _uses_a_module_fixture(item):
            group = item.nodeid.split("::")[0]
        if group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))
    items[:] = sorted(items, key=_start_order(items))  # stable: otherwise each chain keeps its order


def testbed_group(module: str) -> str:
    """The testbed group of a module (its tests keep their order); one not listed goes by its name's hash."""
    listed = next((group for group, modules in TESTBED_GROUPS.items() if module in modules), None)
    return listed or sorted(TESTBED_GROUPS)[zlib.crc32(module.encode()) % len(TESTBED_GROUPS)]


def _start_order(items: list):
    """The daemons' groups first, then the groups and tests that hold a slow test, then the rest;
    in a group, its exclusive tests last."""
    rank: dict[str, int] = {}
    for item in items:
        name = _scope(item)
        mine = 0 if name in DAEMON_GROUPS else 1 if item.get_closest_marker("slow") else 2
        rank[name] = min(rank.get(name, mine), mine)
    return lambda item: (rank[_scope(item)], 1 if item.get_closest_marker("testbed_exclusive") else 0)


def _scope(item) -> str:
    marker = item.get_closest_marker("xdist_group")
    return marker.args[0] if marker else item.nodeid


def _uses_a_module_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info else ()
    return any(d.scope in ("module", "class", "package") for chain in defs for d in chain)


NICE = 5


def prioritise(item) -> None:
    """This worker's CPU priority for ``item``: nice 5 without a daemon, 0 with one (back to 0 only
    as root; elsewhere the worker keeps 5, as do all in the fast tier). Linux's niceness is the
    thread's: this one runs the tests and starts their processes, which inherit it."""
    wanted = 0 if any(item.get_closest_marker(mark) for mark in DAEMON_MARKS) else NICE
    if os.getpriority(os.PRIO_PROCESS, 0) != wanted:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, wanted)
        except PermissionError:
            pass


class Turn:
    """This worker's hold on the testbed: shared for a testbed test, exclusive for one marked
    testbed_exclusive. A reader/writer lock (SQLite's, through filelock) across the workers: a
    writer waiting bars new readers, so an exclusive test waits only for the tests running when it
    asked. An exclusive hold carries over to the next test when that one is exclusive too."""

    def __init__(self) -> None:
        self.lock = None
        self.held = None
        self.mode: str | None = None

    @staticmethod
    def wanted(item) -> str | None:
        if item is None or not item.get_closest_marker("slurm"):
            return None
        return "write" if item.get_closest_marker("testbed_exclusive") else "read"

    def take(self, item) -> None:
        mode = self.wanted(item)
        if mode is None or mode == self.mode:
            return
        self.release()
        if self.lock is None:
            from filelock import ReadWriteLock

            LOCKS.mkdir(exist_ok=True)
            self.lock = ReadWriteLock(LOCKS / "testbed.db", is_singleton=False)
        self.held = self.lock.write_lock() if mode == "write" else self.lock.read_lock()
        self.held.__enter__()
        self.mode = mode

    def after(self, nextitem) -> None:
        if self.mode and not (self.mode == "write" and self.wanted(nextitem) == "write"):
            self.release()

    def release(self) -> None:
        if self.held is not None:
            self.held.__exit__(None, None, None)
        self.held = self.mode = None


TURN = Turn()
