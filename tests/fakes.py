"""Test doubles, all in one place: runners at the subprocess boundary (one that records
argv and answers from canned Slurm output captured from the testbed, a fake Slurm for
`submit`, real runners with one thing changed), clocks, and stand-ins for DVC, Lightning
and Hugging Face `datasets` objects."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from support import ACCOUNT

from orchestrator.util.runner import Completed, SubprocessRunner

Answer = Completed | Callable[[Sequence[str]], Completed]
NO_SUCH_PID = 2**22 + 1  # above Linux's largest pid_max


def ok(stdout: str = "", stderr: str = "", rc: int = 0) -> Callable[[Sequence[str]], Completed]:
    return lambda argv: Completed(tuple(argv), rc, stdout, stderr)


@dataclass
class FakeProcess:
    """A child started through :meth:`FakeRunner.spawn`: finished with ``returncode``,
    or running while a test holds it at None."""

    argv: tuple[str, ...]
    cwd: Path | None
    pid: int
    returncode: int | None = 0
    terminated: bool = False

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            raise subprocess.TimeoutExpired(list(self.argv), timeout or 0)
        return self.returncode

    def terminate(self) -> None:
        self.terminated = True
        if self.returncode is None:
            self.returncode = -15  # as Popen reports SIGTERM


@dataclass
class FakeRunner:
    """Answers by command name; every call (run or spawn) is recorded in ``calls``,
    every started child in ``spawned``."""

    answers: dict[str, Answer] = field(default_factory=dict)
    installed: set[str] = field(default_factory=lambda: {"sbatch", "sacct", "squeue", "scontrol", "sacctmgr", "scancel"})
    calls: list[list[str]] = field(default_factory=list)
    spawned: list[FakeProcess] = field(default_factory=list)
    exit_codes: dict[str, int | None] = field(default_factory=dict)  # a spawned child's, by command name (0 if not named)
    stream_envs: list[dict[str, str]] = field(default_factory=list)  # the env of each stream call
    after_line: Callable[[str], None] | None = None  # after each streamed line: a test looks at files mid-run, or raises

    def run(self, argv, *, input=None, timeout=None):
        self.calls.append(list(argv))
        answer = self.answers.get(argv[0])
        if answer is None:
            raise FileNotFoundError(argv[0])
        return answer(argv) if callable(answer) else answer

    def spawn(self, argv, cwd=None):
        self.calls.append(list(argv))
        child = FakeProcess(tuple(argv), cwd, 40000 + len(self.spawned), self.exit_codes.get(argv[0], 0))
        self.spawned.append(child)
        return child

    def which(self, name):
        return f"/usr/bin/{name}" if name in self.installed else None

    def stream(self, argv, on_line, *, timeout=None, env=None, on_start=None):
        """As ``run``, then the answer's stdout and stderr handed to ``on_line`` line by line.
        The child's pid is above Linux's largest: no process has it."""
        self.stream_envs.append(dict(env or {}))
        if on_start is not None:
            on_start(NO_SUCH_PID)
        done = self.run(argv, timeout=timeout)
        for line in (done.stdout + done.stderr).splitlines():
            on_line(line)
            if self.after_line:
                self.after_line(line)
        return done.returncode

    def called(self, name: str) -> list[list[str]]:
        return [c for c in self.calls if c[0] == name]


# --- a fake Slurm for `orchestrator run` and `submit` ------------------------------------------

PING = ok("Slurmctld(primary) at host is UP\n")
CONFIG = ok("ClusterName             = testbed\n")


def sacct_sequence(*states):
    """sacct answers: one state per call, the last one repeated."""
    answers = list(states)

    def answer(argv):
        if "-j" not in argv:
            return Completed(tuple(argv), 0, "", "")  # a search by job name (after a damaged ledger): none
        job = argv[argv.index("-j") + 1]
        state = answers.pop(0) if len(answers) > 1 else answers[0]
        code = "1:0" if state == "FAILED" else "0:0"
        return Completed(tuple(argv), 0, f"{job}|{state}|{code}|5|2|node[1-2]|None\n", "")

    return answer


def fake_slurm(**overrides):
    """A FakeRunner as the testbed answers: controller up, the account known, job 101
    pending, running, then completed; ``overrides`` replace answers by command name."""
    answers = {
        "scontrol": lambda argv: (PING if argv[1] == "ping" else CONFIG)(argv),
        "sacctmgr": ok(f"{ACCOUNT}\n"),
        "sbatch": ok("101\n"),
        "sacct": sacct_sequence("PENDING", "RUNNING", "COMPLETED"),
        "squeue": ok(""),
    }
    answers.update(overrides)
    return FakeRunner(answers)


class FakeSlurm:
    """sbatch hands out 101, 102, ...; sacct reports each job in the state ``states`` gives it."""

    def __init__(self) -> None:
        self.next_id = 101
        self.states: dict[str, str] = {}
        self.refuse: dict[str, str] = {}  # script file name -> sbatch's stderr
        self.named: dict[str, tuple[str, str]] = {}  # job -> (job name, working dir)
        self.config = "ClusterName = testbed\n"  # what `scontrol show config` prints
        self.runner = FakeRunner(
            {
                "sbatch": self.sbatch,
                "sacct": self.sacct,
                "squeue": self.squeue,
                "scontrol": lambda argv: ok("Slurmctld(primary) at host is UP\n" if argv[1] == "ping" else self.config)(argv),
                "sacctmgr": ok(f"{ACCOUNT}\n"),
                "scancel": ok(""),
            }
        )

    def sbatch(self, argv):
        name = Path(argv[-1]).name
        if name in self.refuse:
            return Completed(tuple(argv), 1, "", self.refuse[name])
        job = str(self.next_id)
        self.next_id += 1
        script = Path(argv[-1])
        text = script.read_text() if script.is_file() else ""
        array = re.search(r"^#SBATCH --array=0-(\d+)", text, re.M)
        name = re.search(r"^#SBATCH --job-name=(\S+)", text, re.M)
        workdir = next((a.split("=", 1)[1] for a in argv if a.startswith("--chdir=")), "")
        self.named[job] = (name.group(1) if name else script.stem, workdir)
        if array:  # one state per task, 101_0, 101_1, ...
            self.states.update({f"{job}_{i}": "PENDING" for i in range(int(array.group(1)) + 1)})
        else:
            self.states[job] = "PENDING"
        return Completed(tuple(argv), 0, f"{job}\n", "")

    def sacct(self, argv):
        named = next((a.split("=", 1)[1] for a in argv if a.startswith("--name=")), None)
        if named is not None:
            return Completed(tuple(argv), 0, self._named(named), "")
        asked = argv[argv.index("-j") + 1].split(",")  # an array's tasks are asked for by the array's id
        lines = [f"{job}|{state}|0:0|5|1|node1|None\n" for job, state in self.states.items() if job.split("_")[0] in asked]
        return Completed(tuple(argv), 0, "".join(lines), "")

    def squeue(self, argv):
        """Only ``squeue -n NAME`` (finding a job by name) lists anything: the fake's jobs are all in sacct."""
        if "-n" not in argv:
            return Completed(tuple(argv), 0, "", "")
        return Completed(tuple(argv), 0, self._named(argv[argv.index("-n") + 1]), "")

    def _named(self, name: str) -> str:
        jobs = [j for j in self.states if self.named.get(j.split("_")[0], ("", ""))[0] == name]
        return "".join(f"{j}|{self.named[j.split('_')[0]][1]}\n" for j in jobs)

    def max_submit(self, limit: int, queued: int) -> None:
        """The association allows ``limit`` jobs queued or running (MaxSubmitJobs) and ``queued`` of ours are."""
        assoc = {"format=account": f"{ACCOUNT}\n", "format=MaxSubmit,GrpSubmit,DefaultQOS": f"{limit}||normal\n"}
        self.runner.answers["sacctmgr"] = lambda argv: ok(next((v for k, v in assoc.items() if k in argv), ""))(argv)
        # Only the count of our jobs under the account is asked here; finding a job by name still works.
        mine = "".join(f"{70 + n}\n" for n in range(queued))
        self.runner.answers["squeue"] = lambda argv: ok(mine)(argv) if "-A" in argv else self.squeue(argv)

    def sbatch_calls(self) -> dict[str, list[str]]:
        """sbatch's argv by the script it submitted (file name without suffix), in call order."""
        return {Path(argv[-1]).stem: argv for argv in self.runner.called("sbatch")}


# --- runners that only record (the testbed's) ---------------------------------------------------


class RecordingRunner:
    """Records every argv and answers success; a spawn is a test failure (the testbed runs its commands to the end)."""

    def __init__(self):
        self.calls = []

    def run(self, argv, *, input=None, timeout=None):
        self.calls.append(tuple(argv))
        return Completed(tuple(argv), 0, "", "")

    def spawn(self, argv, cwd=None):
        self.calls.append(tuple(argv))
        raise AssertionError(f"the testbed runs its commands to the end; it spawned {argv!r}")

    def which(self, name):
        return f"/usr/bin/{name}"


class FailingRunner(RecordingRunner):
    """Every command fails as a slurmctld with a bad config does."""

    def run(self, argv, *, input=None, timeout=None):
        return Completed(tuple(argv), 1, "", "slurmctld: fatal: bad config")


# --- real runners with one thing changed ---------------------------------------------------------


class NoShellcheck(SubprocessRunner):
    """Finds no tool on PATH (shellcheck among them); runs what it is given."""

    def which(self, name):
        return None


class NoRsyncRunner(SubprocessRunner):
    """A machine without rsync: the push falls back to scp."""

    def which(self, name):
        return None if name == "rsync" else super().which(name)


class KillingRunner(SubprocessRunner):
    """Runs rsync slowly (--bwlimit) and kills it once ``part`` holds ``kill_at`` bytes."""

    def __init__(self, part: Path, kill_at: int) -> None:
        self.part, self.kill_at, self.killed_at = part, kill_at, 0

    def run(self, argv, *, input=None, timeout=None):
        if argv[0] != "rsync":
            return super().run(argv, input=input, timeout=timeout)
        argv = [argv[0], "--bwlimit=8000", *argv[1:]]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            if self.part.exists() and self.part.stat().st_size >= self.kill_at:
                self.killed_at = self.part.stat().st_size
                proc.kill()
                break
            time.sleep(0.01)
        out, err = proc.communicate()
        return Completed(tuple(argv), proc.returncode, out, err)


class CorruptingRunner(SubprocessRunner):
    """Flips a byte of the transferred file after rsync, as a bad disk or link would."""

    def __init__(self, part: Path) -> None:
        self.part = part

    def run(self, argv, *, input=None, timeout=None):
        done = super().run(argv, input=input, timeout=timeout)
        if argv[0] == "rsync":
            with self.part.open("r+b") as f:
                f.seek(1000)
                byte = f.read(1)
                f.seek(1000)
                f.write(bytes([byte[0] ^ 0xFF]))
        return done


# --- clocks ----------------------------------------------------------------------------------------


class FakeClock:
    """`orchestrator run`'s clock: sleeping only moves the time on, and is recorded."""

    def __init__(self):
        self.t = 1000.0
        self.sleeps = []

    def now(self):
        return self.t

    def sleep(self, s):
        self.sleeps.append(s)
        self.t += s


class ManualClock:
    """A monotonic clock (a callable) that says ``now``, which the test sets."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# --- stand-ins for DVC, Lightning and `datasets` objects -------------------------------------------


class FakeStages:
    """What Fingerprinter asks DVC (fingerprint.DvcStages): an item's wdir and its deps (path and hash)."""

    def __init__(self, root: Path, deps: dict[str, list[str]]) -> None:
        self.root, self.deps = root, deps
        self.collected: list[str] = []

    def __call__(self, name: str):
        self.collected.append(name)
        found = [SimpleNamespace(def_path=d, get_hash=lambda d=d: f"md5:{d}") for d in self.deps[name]]
        return SimpleNamespace(wdir=str(self.root), deps=found)


class FakeStrategy:
    """A Lightning strategy's reduce over ``ranks`` ranks that all measured the same."""

    def __init__(self, ranks: int = 1) -> None:
        self.ranks = ranks

    def reduce(self, tensor, reduce_op):
        assert reduce_op == "sum"
        return tensor * self.ranks  # every rank measured the same


class RecordingLogger:
    """A Lightning logger that keeps what log_metrics was given (as numbers)."""

    def __init__(self):
        self.calls = []

    def log_metrics(self, metrics, step):
        assert not any(v.requires_grad for v in metrics.values())  # detached: no graph kept alive
        self.calls.append((step, {k: v.item() for k, v in metrics.items()}))


class FakeDataset(dict):
    """What our reader uses of a `datasets` Dataset: column_names and a column by name."""

    @property
    def column_names(self):
        return list(self)


class FakeDatasetDict(dict):
    """What our reader uses of a `datasets` DatasetDict: its splits by name."""
