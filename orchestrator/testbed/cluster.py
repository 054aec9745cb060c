"""The testbed's daemon steps: bring the cluster up, take it down, report on it.

``orchestrator testbed up`` installs Debian's packages (munge, MariaDB, Slurm 22.05)
and starts munged, MariaDB, slurmdbd, slurmctld and one slurmd per node
(``slurmd -N NODE``) on this one host, as :class:`~orchestrator.testbed.settings.LocalSlurmSettings`
describes them, matching the built-in ``testbed`` profile.

Each step of :class:`Testbed` checks state first and does only what is missing
(packages, a changed file, a dead daemon, an account), so ``up`` on a running testbed
takes about a second, and ``up`` after a restart of the machine (config there, daemons
dead) just starts the daemons. Every command goes through a
:class:`~orchestrator.util.runner.Runner` as an argv list.

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
import stat
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.testbed.conf import (
    CONFIG_OF,
    ETC,
    LOG_DIR,
    MUNGE_LOG,
    MYSQL_LOG,
    SLURMCTLD_LOG,
    SLURMDBD_LOG,
    SPOOL_DIR,
    STATE_DIR,
    config_files,
    database_sql,
    hosts_addition,
    slurmd_log,
)
from orchestrator.testbed.parse import node_is_up, parse_associations, parse_installed, parse_node_states
from orchestrator.testbed.procs import log_tail, pids_of, started_at
from orchestrator.testbed.settings import LocalSlurmSettings
from orchestrator.util import files
from orchestrator.util.runner import Completed, Runner, SubprocessRunner

PACKAGES = ("munge", "mariadb-server", "slurmdbd", "slurmctld", "slurmd", "slurm-client")


class TestbedError(OrchestratorError):
    """The testbed cannot be brought up, or a daemon did not come up."""

    __test__ = False  # not a pytest test class, despite its name
    exit_code = 1


class Testbed:
    """Brings the testbed up, down, or reports on it. Each step checks before it acts."""

    __test__ = False

    def __init__(
        self,
        settings: LocalSlurmSettings,
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
        """(component, up, detail) for each of ``LocalSlurmSettings.components``, in that order; needs no root."""
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
