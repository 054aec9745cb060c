"""The project's own Slurm testbed: a real two-node Slurm cluster on this machine.

``orchestrator testbed up`` installs Debian's packages (munge, MariaDB, Slurm 22.05)
and starts munged, MariaDB, slurmdbd, slurmctld and two slurmd (``slurmd -N node1``,
``slurmd -N node2``) on this one host, matching the built-in ``testbed`` profile:
cluster ``testbed``, partition ``debug`` (both nodes, at most 2, 01:00:00), 8 cores
and 4 fake GPUs per node, account ``project_465000858`` enforced by accounting.

Three layers, top to bottom:

- :class:`Settings`, a frozen dataclass, and pure functions that turn it into file
  contents (``slurm.conf``, ``gres.conf``, ``slurmdbd.conf``, SQL, ``/etc/hosts``)
  and parse command output; the unit tests cover these without root.
- :class:`Testbed`, the side-effecting steps. Each step checks state first and does
  only what is missing (packages, a changed file, a dead daemon, an account), so
  ``up`` on a running testbed takes about a second, and ``up`` after a restart of the
  machine (config there, daemons dead) just starts the daemons. Every command goes
  through a :class:`~orchestrator.runner.Runner` as an argv list.
- the click group :func:`testbed` (``up``, ``down``, ``status``).

There is no systemd here, so daemons are started directly; the Slurm daemons and
munged daemonize themselves, ``mysqld_safe`` is put in the background by
``start-stop-daemon``. ``down`` stops the Slurm daemons and leaves munge and MariaDB
running (generic services that hold no testbed state worth resetting, and keeping
them makes the next ``up`` quicker); ``down --all`` stops those too.
"""

from __future__ import annotations

import os
import pwd
import shlex
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from orchestrator.errors import OrchestratorError
from orchestrator.util import files
from orchestrator.util.runner import Completed, Runner, SubprocessRunner


class TestbedError(OrchestratorError):
    """The testbed cannot be brought up, or a daemon did not come up."""

    __test__ = False  # not a pytest test class, despite its name
    exit_code = 1


# --- settings and pure file contents -----------------------------------------------


@dataclass(frozen=True)
class Settings:
    """What the testbed is; the defaults match orchestrator/config/profiles/testbed.yaml."""

    hostname: str = "localhost"  # this host's short name: slurmctld refuses to start under any other
    cluster_name: str = "testbed"
    partition: str = "debug"
    nodes: tuple[str, ...] = ("node1", "node2")
    max_time: str = "01:00:00"
    exclusive: bool = True  # the profile's whole_node: jobs get whole nodes, so CPU masks are theirs
    cores: int = 8
    gpus: int = 4
    memory_mb: int = 4000
    first_port: int = 17001  # one slurmd port per node, all on this host
    account: str = "project_465000858"
    users: tuple[str, ...] = ("root",)
    db_name: str = "slurm_acct_db"
    db_user: str = "slurm"
    # A throwaway database that only listens on this host; the file holding it is mode 600.
    db_password: str = "testbed-slurmdbd"

    @classmethod
    def for_this_machine(cls) -> Settings:
        """Settings with this host's name, and the user behind sudo (if any) as a second user."""
        users = ["root"]
        sudo_user = os.environ.get("SUDO_USER")
        if sudo_user and sudo_user != "root":
            users.append(sudo_user)
        return cls(hostname=socket.gethostname().split(".")[0], users=tuple(users))

    def port(self, node: str) -> int:
        return self.first_port + self.nodes.index(node)

    def gpu_devices(self, node: str) -> tuple[str, ...]:
        """Device files of ``node``'s fake GPUs: a different set per node, as on a real cluster."""
        first = self.nodes.index(node) * self.gpus
        return tuple(f"/dev/fakegpu{i}" for i in range(first, first + self.gpus))


ETC = Path("/etc/slurm")
LOG_DIR = Path("/var/log/slurm")
STATE_DIR = Path("/var/spool/slurmctld")
SPOOL_DIR = Path("/var/spool/slurmd")
MUNGE_LOG = Path("/var/log/munge/munged.log")
MYSQL_LOG = Path("/var/log/mysql/error.log")
SLURMDBD_LOG = LOG_DIR / "slurmdbd.log"
SLURMCTLD_LOG = LOG_DIR / "slurmctld.log"
# The config files each daemon reads at start: a newer file means a restart.
CONFIG_OF = {
    "slurmdbd": (ETC / "slurmdbd.conf",),
    "slurmctld": (ETC / "slurm.conf", ETC / "gres.conf"),
    "slurmd": (ETC / "slurm.conf", ETC / "gres.conf"),
}
PACKAGES = ("munge", "mariadb-server", "slurmdbd", "slurmctld", "slurmd", "slurm-client")
COMPONENTS = ("munge", "mariadb", "slurmdbd", "slurmctld", "node1", "node2", "account")
HEADER = "# Written by `orchestrator testbed up` (orchestrator/testbed.py); `up` rewrites it.\n"


def slurmd_log(node: str) -> Path:
    return LOG_DIR / f"slurmd-{node}.log"


def slurm_conf(s: Settings) -> str:
    nodes = "\n".join(
        f"NodeName={n} NodeHostname={s.hostname} NodeAddr=127.0.0.1 Port={s.port(n)} CPUs={s.cores} Boards=1 "
        f"SocketsPerBoard=1 CoresPerSocket={s.cores} ThreadsPerCore=1 RealMemory={s.memory_mb} Gres=gpu:{s.gpus}"
        for n in s.nodes
    )
    oversubscribe = " OverSubscribe=EXCLUSIVE" if s.exclusive else ""
    return f"""{HEADER}ClusterName={s.cluster_name}
SlurmctldHost={s.hostname}(127.0.0.1)
# One host, one user: the daemons run as root, which also spares making a slurm user.
SlurmUser=root
AuthType=auth/munge
StateSaveLocation={STATE_DIR}
SlurmctldPidFile=/run/slurmctld.pid
SlurmctldLogFile={SLURMCTLD_LOG}
# Several slurmd on one host: each needs its own spool dir, pid file and log (%n: node name).
SlurmdSpoolDir={SPOOL_DIR}/%n
SlurmdPidFile=/run/slurmd-%n.pid
SlurmdLogFile={LOG_DIR}/slurmd-%n.log
# The nodes claim {s.cores} cores each, more than the host has: trust slurm.conf, not the
# hardware, or the nodes register as INVAL.
SlurmdParameters=config_overrides
# A node that was down (its slurmd died with the machine) returns when it registers again.
ReturnToService=2
MpiDefault=none
# No cgroups here (no systemd, no delegated cgroup tree): track processes by parentage,
# and bind tasks with sched_setaffinity, which makes --cpu-bind=mask_cpu:... real.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageTRES=gres/gpu
# Refuse jobs without a valid account, as production clusters do.
AccountingStorageEnforce=associations,limits
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
{nodes}
PartitionName={s.partition} Nodes={",".join(s.nodes)} Default=YES MaxTime={s.max_time} MaxNodes={len(s.nodes)}{oversubscribe} State=UP
"""


def gres_conf(s: Settings) -> str:
    lines = "".join(f"NodeName={n} Name=gpu File={','.join(s.gpu_devices(n))}\n" for n in s.nodes)
    return f"""{HEADER}# Fake GPUs: character devices like /dev/null (mknod c 1 3). Slurm needs device files;
# Count= alone registered no GPUs and left the nodes INVAL.
AutoDetect=off
{lines}"""


def slurmdbd_conf(s: Settings) -> str:
    return f"""{HEADER}AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=/run/slurmdbd.pid
LogFile={SLURMDBD_LOG}
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc={s.db_name}
StorageUser={s.db_user}
StoragePass={s.db_password}
"""


def database_sql(s: Settings) -> str:
    """SQL that makes slurmdbd's database and user; safe to run again."""
    user = f"'{s.db_user}'@'localhost'"
    return (
        f"CREATE DATABASE IF NOT EXISTS `{s.db_name}`;\n"
        f"CREATE USER IF NOT EXISTS {user} IDENTIFIED BY '{s.db_password}';\n"
        f"ALTER USER {user} IDENTIFIED BY '{s.db_password}';\n"
        f"GRANT ALL PRIVILEGES ON `{s.db_name}`.* TO {user};\n"
    )


def config_files(s: Settings) -> dict[Path, tuple[str, int]]:
    """Each config file's path -> (content, mode). slurmdbd.conf holds a password: 600."""
    return {
        ETC / "slurm.conf": (slurm_conf(s), 0o644),
        ETC / "gres.conf": (gres_conf(s), 0o644),
        ETC / "slurmdbd.conf": (slurmdbd_conf(s), 0o600),
    }


def hosts_addition(hosts_text: str, nodes: Sequence[str]) -> str:
    """The line to append to /etc/hosts so the node names resolve ('' if they already do)."""
    names: set[str] = set()
    for line in hosts_text.splitlines():
        fields = line.split("#", 1)[0].split()
        names.update(fields[1:])
    missing = [n for n in nodes if n not in names]
    return f"127.0.0.1 {' '.join(missing)}\n" if missing else ""


def parse_installed(dpkg_output: str) -> set[str]:
    """Packages that ``dpkg-query -W -f '${Package} ${db:Status-Abbrev}\\n'`` lists as installed."""
    installed = set()
    for line in dpkg_output.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[1].startswith("ii"):
            installed.add(fields[0].split(":")[0])
    return installed


def parse_node_states(sinfo_output: str) -> dict[str, str]:
    """``sinfo -h -N -o '%N %T'`` -> node -> state (e.g. idle, mixed, down*, drained)."""
    states = {}
    for line in sinfo_output.splitlines():
        fields = line.split()
        if len(fields) == 2:
            states[fields[0]] = fields[1].lower()
    return states


def node_is_up(state: str | None) -> bool:
    """Responding (no trailing ``*``) and able to run jobs."""
    return state is not None and state.split("+")[0] in {"idle", "mixed", "allocated", "completing"}


def parse_associations(sacctmgr_output: str) -> set[tuple[str, str, str]]:
    """``sacctmgr -n -P show assoc format=cluster,account,user`` -> {(cluster, account, user)}."""
    return {tuple(line.split("|")[:3]) for line in sacctmgr_output.splitlines() if line.count("|") >= 2}  # type: ignore[misc]


# --- processes ----------------------------------------------------------------------


def processes() -> list[tuple[int, list[str]]]:
    """(pid, argv) of every live process (zombies have an empty cmdline and drop out)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if raw:
            found.append((int(entry.name), raw.rstrip(b"\0").decode(errors="replace").split("\0")))
    return found


def _runs(argv: list[str], *names: str) -> bool:
    """Whether argv runs one of ``names`` (scripts show as `/bin/sh /usr/bin/NAME`)."""
    return any(os.path.basename(a) in names for a in argv[:2])


def _node_of(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "-N" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("-N") and len(arg) > 2:
            return arg[2:]
    return None


# Which processes make up each daemon; "slurmd:NODE" is the slurmd of one node.
_DAEMONS: dict[str, Callable[[list[str]], bool]] = {
    "munge": lambda a: _runs(a, "munged"),
    "mysqld_safe": lambda a: _runs(a, "mysqld_safe", "mariadbd-safe"),
    "mariadb": lambda a: _runs(a, "mariadbd", "mysqld"),
    "slurmdbd": lambda a: _runs(a, "slurmdbd"),
    "slurmctld": lambda a: _runs(a, "slurmctld"),
}


def pids_of(daemon: str, table: list[tuple[int, list[str]]] | None = None) -> list[int]:
    table = processes() if table is None else table
    if daemon.startswith("slurmd:"):
        node = daemon.split(":", 1)[1]
        return [pid for pid, argv in table if _runs(argv, "slurmd") and _node_of(argv) == node]
    return [pid for pid, argv in table if _DAEMONS[daemon](argv)]


def started_at(pid: int) -> float:
    """When process ``pid`` started, in seconds since the epoch (0.0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    except (OSError, IndexError, StopIteration):
        return 0.0
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat: start time in clock ticks


def log_tail(path: Path, lines: int = 8) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


# --- the side-effecting steps ---------------------------------------------------------


class Testbed:
    """Brings the testbed up, down, or reports on it. Each step checks before it acts."""

    __test__ = False

    def __init__(
        self,
        settings: Settings,
        runner: Runner | None = None,
        say: Callable[[str], None] = lambda message: None,
        timeout: float = 120.0,
    ) -> None:
        self.s = settings
        self.runner = runner or SubprocessRunner()
        self.say = say
        self.timeout = timeout  # seconds each daemon gets to come up

    # -- up --

    def up(self) -> None:
        require_root("testbed up")
        self.ensure_packages()
        self.ensure_hosts()
        self.ensure_devices()
        self.ensure_files()
        self.ensure_munge()
        self.ensure_mariadb()
        self.ensure_slurmdbd()
        self.ensure_accounting()  # the cluster must be known before slurmctld registers
        self.ensure_slurmctld()
        self.ensure_slurmds()

    def ensure_packages(self) -> None:
        if not self.runner.which("apt-get"):
            raise TestbedError("the testbed installs Debian's packages, but apt-get is not here")
        listed = self.run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n", *PACKAGES], check=False)
        missing = [p for p in PACKAGES if p not in parse_installed(listed.stdout)]
        if not missing:
            return
        self.say(f"installing {' '.join(missing)} (apt-get)")
        # Debian's package lists may be missing or stale on a new machine.
        self.run(["apt-get", "update", "-qq"], timeout=600)
        # noninteractive: no debconf questions; no daemon is started by the packages'
        # scripts here (policy-rc.d or no init), the steps below start them.
        self.run(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", *missing], timeout=1200)

    def ensure_hosts(self, path: Path = Path("/etc/hosts")) -> None:
        line = hosts_addition(path.read_text() if path.exists() else "", self.s.nodes)
        if line:
            self.say(f"adding to {path}: {line.strip()}")
            text = path.read_text() if path.exists() else ""
            # Append in place: /etc/hosts is often a bind mount that cannot be replaced.
            with path.open("a") as f:
                f.write(("" if not text or text.endswith("\n") else "\n") + line)

    def ensure_devices(self) -> None:
        for node in self.s.nodes:
            for dev in self.s.gpu_devices(node):
                if not os.path.exists(dev):
                    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # same device as /dev/null

    def ensure_files(self) -> set[Path]:
        """Write config files whose content differs; make the daemons' directories. Returns what changed."""
        for d in (ETC, LOG_DIR, STATE_DIR, *(SPOOL_DIR / n for n in self.s.nodes)):
            d.mkdir(parents=True, exist_ok=True)
        changed = set()
        for path, (content, mode) in config_files(self.s).items():
            if path.exists() and path.read_text() == content:
                if stat.S_IMODE(path.stat().st_mode) != mode:
                    path.chmod(mode)
                continue
            self.say(f"writing {path}")
            files.atomic_write(path, content, mode=mode)
            changed.add(path)
        return changed

    def ensure_munge(self) -> None:
        munge = pwd.getpwnam("munge")
        key = Path("/etc/munge/munge.key")
        if not key.exists():
            self.say("creating the munge key")
            self.run(["mungekey", "--create", f"--keyfile={key}"])
        # munged refuses to start when its directories or key belong to root.
        Path("/run/munge").mkdir(exist_ok=True)
        for p in (Path("/run/munge"), Path("/var/log/munge"), Path("/var/lib/munge"), Path("/etc/munge"), key):
            if p.stat().st_uid != munge.pw_uid:
                os.chown(p, munge.pw_uid, munge.pw_gid)
        if pids_of("munge"):
            if self.munge_works():
                return
            self.stop("munge")  # running but not answering: start it anew
        self.say("starting munged")
        self.run(["start-stop-daemon", "--start", "--oknodo", "--chuid", "munge", "--exec", "/usr/sbin/munged"], log=MUNGE_LOG)
        self.wait_for("munged", self.munge_works, MUNGE_LOG)

    def munge_works(self) -> bool:
        cred = self.run(["munge", "-n"], check=False, timeout=10)
        return cred.returncode == 0 and self.run(["unmunge"], input=cred.stdout, check=False, timeout=10).returncode == 0

    def ensure_mariadb(self) -> None:
        if not self.mariadb_works():
            mysql = pwd.getpwnam("mysql")
            for d in (Path("/run/mysqld"), MYSQL_LOG.parent):
                d.mkdir(exist_ok=True)
                os.chown(d, mysql.pw_uid, mysql.pw_gid)
            if not Path("/var/lib/mysql/mysql").is_dir():  # the package's script normally does this
                self.say("initialising MariaDB's data directory")
                self.run(["mariadb-install-db", "--user=mysql", "--datadir=/var/lib/mysql"], timeout=300)
            if not pids_of("mariadb"):
                self.say("starting MariaDB (mysqld_safe)")
                # mysqld_safe stays in the foreground: start-stop-daemon puts it in the background.
                # "Already running" is judged by the server binary, not by the name
                # mysqld_safe: the zombie of a just-stopped mysqld_safe (PID 1 reaps late
                # here) still bears that name and would block the start.
                self.run(
                    ["start-stop-daemon", "--start", "--background", "--exec", "/usr/sbin/mariadbd",
                     "--startas", "/usr/bin/mysqld_safe", "--", "--user=mysql", f"--log-error={MYSQL_LOG}"],
                    log=MYSQL_LOG,
                )  # fmt: skip
            self.wait_for("MariaDB", self.mariadb_works, MYSQL_LOG)
        self.run(["mariadb", "--batch"], input=database_sql(self.s), log=MYSQL_LOG)

    def mariadb_works(self) -> bool:
        return self.run(["mariadb-admin", "--connect-timeout=5", "ping"], check=False, timeout=15).returncode == 0

    def restart_if_stale(self, daemon: str) -> None:
        """Stop ``daemon`` if it started before its config files last changed (then it is started anew).

        Judged by times rather than by what this run wrote, so a change written by an
        earlier `up` that failed half-way is still picked up.
        """
        changed = max(p.stat().st_mtime for p in CONFIG_OF[daemon.split(":")[0]])
        if any(started_at(pid) < changed for pid in pids_of(daemon)):
            self.say(f"{daemon.replace(':', ' -N ')} runs with an older config")
            self.stop(daemon)

    def ensure_slurmdbd(self) -> None:
        self.restart_if_stale("slurmdbd")
        if pids_of("slurmdbd") and self.slurmdbd_works():
            return
        if not pids_of("slurmdbd"):
            self.say("starting slurmdbd")
            self.run(["slurmdbd"], log=SLURMDBD_LOG)
        self.wait_for("slurmdbd", self.slurmdbd_works, SLURMDBD_LOG)

    def slurmdbd_works(self) -> bool:
        return self.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], check=False, timeout=20).returncode == 0

    def associations(self) -> set[tuple[str, str, str]]:
        out = self.run(["sacctmgr", "-n", "-P", "show", "assoc", "format=cluster,account,user"], timeout=20, log=SLURMDBD_LOG)
        return parse_associations(out.stdout)

    def ensure_accounting(self) -> None:
        s = self.s
        have = self.associations()
        steps = []
        if not any(c == s.cluster_name for c, _, _ in have):
            steps.append(["add", "cluster", s.cluster_name])
        if (s.cluster_name, s.account, "") not in have:
            steps.append(["add", "account", s.account, f"cluster={s.cluster_name}", f"description={s.account}", "organization=testbed"])
        steps += [
            ["add", "user", user, f"account={s.account}", f"cluster={s.cluster_name}"]
            for user in s.users
            if (s.cluster_name, s.account, user) not in have
        ]
        for step in steps:
            self.say("sacctmgr " + " ".join(step))
            self.run(["sacctmgr", "-i", *step], timeout=30, log=SLURMDBD_LOG)

    def ensure_slurmctld(self) -> None:
        self.restart_if_stale("slurmctld")
        if not pids_of("slurmctld"):
            # No -c: the saved state keeps job ids growing across restarts (sacct tells
            # jobs apart by id), and on a first start there is no state to clear anyway.
            self.say("starting slurmctld")
            self.run(["slurmctld"], log=SLURMCTLD_LOG)
        self.wait_for("slurmctld", self.slurmctld_works, SLURMCTLD_LOG)

    def slurmctld_works(self) -> bool:
        ping = self.run(["scontrol", "ping"], check=False, timeout=20)
        return ping.returncode == 0 and "UP" in ping.stdout

    def node_states(self) -> dict[str, str]:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False, timeout=20)
        return parse_node_states(out.stdout) if out.returncode == 0 else {}

    def ensure_slurmds(self) -> None:
        for node in self.s.nodes:
            self.restart_if_stale(f"slurmd:{node}")
            if not pids_of(f"slurmd:{node}"):
                self.say(f"starting slurmd -N {node}")
                self.run(["slurmd", "-N", node], log=slurmd_log(node))
        resumed: set[str] = set()

        def nodes_up() -> bool:
            states = self.node_states()
            for node in self.s.nodes:
                state = states.get(node, "")
                # Responding but drained or down (e.g. "Kill task failed" before a restart):
                # ReturnToService does not lift a drain, an explicit resume does.
                if node not in resumed and state and not state.endswith("*") and ("drain" in state or state.startswith("down")):
                    self.say(f"resuming {node} ({state})")
                    self.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)
                    resumed.add(node)
            return all(node_is_up(states.get(n)) for n in self.s.nodes)

        logs = ", ".join(str(slurmd_log(n)) for n in self.s.nodes)
        self.wait_for(f"nodes {','.join(self.s.nodes)} (idle in sinfo)", nodes_up, SLURMCTLD_LOG, extra=f"and {logs}")

    # -- down --

    def down(self, everything: bool = False) -> None:
        require_root("testbed down")
        daemons = [f"slurmd:{n}" for n in self.s.nodes] + ["slurmctld", "slurmdbd"]
        if everything:
            daemons += ["mysqld_safe", "mariadb", "munge"]
        for daemon in daemons:
            self.stop(daemon)

    def stop(self, daemon: str, timeout: float = 30.0) -> None:
        """SIGTERM (the daemons save state on it), then SIGKILL after ``timeout`` seconds."""
        pids = pids_of(daemon)
        if not pids:
            return
        self.say(f"stopping {daemon.replace(':', ' -N ')}")
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                pids = [p for p in pids if p in pids_of(daemon)]
                if not pids:
                    return
                time.sleep(0.2)

    # -- status --

    def status(self) -> list[tuple[str, bool, str]]:
        """(component, up, detail) for each of COMPONENTS; needs no root."""
        rows = []
        rows.append(("munge", bool(pids_of("munge")) and self.munge_works(), "munged answers `munge -n | unmunge`"))
        rows.append(("mariadb", self.mariadb_works(), "mariadb-admin ping"))
        dbd = bool(pids_of("slurmdbd")) and self.slurmdbd_works()
        rows.append(("slurmdbd", dbd, "sacctmgr answers"))
        rows.append(("slurmctld", bool(pids_of("slurmctld")) and self.slurmctld_works(), "scontrol ping"))
        states = self.node_states()
        for node in self.s.nodes:
            state = states.get(node)
            running = bool(pids_of(f"slurmd:{node}"))
            rows.append((node, running and node_is_up(state), f"slurmd {'running' if running else 'not running'}, sinfo: {state or '?'}"))
        has = dbd and (self.s.cluster_name, self.s.account, "root") in self.associations()
        rows.append(("account", has, f"{self.s.account} with user root on cluster {self.s.cluster_name}"))
        return rows

    # -- helpers --

    def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 60.0,
        check: bool = True,
        log: Path | None = None,
    ) -> Completed:
        """Run argv; with ``check``, a failure is a TestbedError naming the command and log."""
        try:
            done = self.runner.run(argv, input=input, timeout=timeout)
        except FileNotFoundError as exc:
            if not check:
                return Completed(tuple(argv), 127, "", str(exc))
            raise TestbedError(f"`{argv[0]}` is not installed (running `{shlex.join(argv)}`)") from exc
        except subprocess.TimeoutExpired as exc:
            if not check:
                return Completed(tuple(argv), 124, "", f"timed out after {timeout} s")
            raise TestbedError(f"`{shlex.join(argv)}` did not finish within {timeout:g} s", hints=_log_hints(log)) from exc
        if check and done.returncode != 0:
            output = (done.stderr.strip() or done.stdout.strip()).splitlines()[-10:]
            raise TestbedError(f"`{shlex.join(argv)}` failed (exit {done.returncode})", output, _log_hints(log))
        return done

    def wait_for(self, what: str, ready: Callable[[], bool], log: Path, extra: str = "") -> None:
        deadline = time.monotonic() + self.timeout
        delay = 0.1
        while not ready():
            if time.monotonic() > deadline:
                raise TestbedError(
                    f"{what} did not come up within {self.timeout:g} s; see {log}{' ' + extra if extra else ''}",
                    log_tail(log),
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)


def _log_hints(log: Path | None) -> list[str]:
    if log is None:
        return []
    tail = log_tail(log, 5)
    return [f"see {log}" + (":\n" + "\n".join(tail) if tail else "")]


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise TestbedError(
            f"{what} needs root: it installs packages, writes /etc and starts system daemons",
            hints=["run it as root, e.g. `sudo orchestrator testbed up`"],
        )


# --- command line -------------------------------------------------------------------


def _say(message: str) -> None:
    click.echo(f"testbed: {message}", err=True)


@click.group()
def testbed() -> None:
    """A real two-node Slurm cluster on this machine (profile `testbed`), for tests.

    Needs root and Debian's apt-get. Daemons log to /var/log/slurm, /var/log/munge and
    /var/log/mysql.
    """


@testbed.command()
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds each daemon gets to come up.")
def up(timeout: float) -> None:
    """Install, configure and start what is missing; quick when already up."""
    start = time.monotonic()
    s = Settings.for_this_machine()
    Testbed(s, say=_say, timeout=timeout).up()
    click.echo(
        f"testbed up in {time.monotonic() - start:.1f} s: cluster {s.cluster_name}, partition {s.partition} "
        f"({','.join(s.nodes)}), account {s.account}"
    )


@testbed.command()
@click.option("--all", "everything", is_flag=True, help="Also stop MariaDB and munge (left running by default).")
def down(everything: bool) -> None:
    """Stop the Slurm daemons (slurmd x2, slurmctld, slurmdbd)."""
    Testbed(Settings.for_this_machine(), say=_say).down(everything)
    click.echo("testbed down" + ("" if everything else " (munge and MariaDB left running)"))


@testbed.command()
@click.pass_context
def status(ctx: click.Context) -> None:
    """One line per component; exit 0 if all are up, else 1."""
    rows = Testbed(Settings.for_this_machine()).status()
    for name, ok, detail in rows:
        click.echo(f"{name:<10} {'up' if ok else 'down':<5} {detail}")
    ctx.exit(0 if all(ok for _, ok, _ in rows) else 1)
