"""The files the testbed's daemons read and write: where they live, and the text of each config file.

Pure functions of :class:`~orchestrator.testbed.settings.LocalSlurmSettings`: ``slurm.conf``,
``gres.conf``, ``slurmdbd.conf``, the SQL that makes slurmdbd's database, and the
line ``/etc/hosts`` needs so the node names resolve. The unit tests cover them without root.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.testbed.settings import LocalSlurmSettings

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
# Part of every config file: changing it makes `up` rewrite the files and restart a running testbed once.
HEADER = "# Written by `orchestrator testbed up`, which rewrites it.\n"


def slurmd_log(node: str) -> Path:
    return LOG_DIR / f"slurmd-{node}.log"


def slurm_conf(s: LocalSlurmSettings) -> str:
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


def gres_conf(s: LocalSlurmSettings) -> str:
    lines = "".join(f"NodeName={n} Name=gpu File={','.join(s.gpu_devices(n))}\n" for n in s.nodes)
    return f"""{HEADER}# Fake GPUs: character devices like /dev/null (mknod c 1 3). Slurm needs device files;
# Count= alone registered no GPUs and left the nodes INVAL.
AutoDetect=off
{lines}"""


def slurmdbd_conf(s: LocalSlurmSettings) -> str:
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


def database_sql(s: LocalSlurmSettings) -> str:
    """SQL that makes slurmdbd's database and user; safe to run again."""
    user = f"'{s.db_user}'@'localhost'"
    return (
        f"CREATE DATABASE IF NOT EXISTS `{s.db_name}`;\n"
        f"CREATE USER IF NOT EXISTS {user} IDENTIFIED BY '{s.db_password}';\n"
        f"ALTER USER {user} IDENTIFIED BY '{s.db_password}';\n"
        f"GRANT ALL PRIVILEGES ON `{s.db_name}`.* TO {user};\n"
    )


def config_files(s: LocalSlurmSettings) -> dict[Path, tuple[str, int]]:
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
