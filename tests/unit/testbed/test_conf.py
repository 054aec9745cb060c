"""The Slurm testbed's configuration, generated anywhere (orchestrator/testbed/settings.py, conf.py,
parse.py): settings match the testbed profile, the config files, /etc/hosts, parsers."""

from __future__ import annotations

import re

import pytest

from orchestrator.config import profile
from orchestrator.slurm import times
from orchestrator.testbed import conf, parse
from orchestrator.testbed.settings import LocalSlurmSettings

S = LocalSlurmSettings(hostname="host")
PROFILE = profile.load("testbed").profile


def conf_lines(text: str) -> list[dict[str, str]]:
    """Each non-comment line of a slurm-style config as {key: value}."""
    rows = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            rows.append(dict(field.split("=", 1) for field in line.split()))
    return rows


def conf_keys(text: str) -> dict[str, str]:
    return {k: v for row in conf_lines(text) if len(row) == 1 for k, v in row.items()}


# --- settings match the profile ----------------------------------------------------------------


def test_settings_match_the_testbed_profile():
    sched, node = PROFILE.scheduler, PROFILE.node
    assert S.cluster_name == sched.cluster_name
    assert S.partition == sched.default_partition
    part = sched.partitions[S.partition]
    assert times.seconds(S.max_time) == times.seconds(part.max_time)
    assert len(S.nodes) == part.max_nodes
    assert S.exclusive == part.whole_node
    assert (S.cores, S.gpus) == (node.cores * node.threads_per_core, node.gpus)
    assert S.memory_mb <= node.memory_gb * 1024
    assert S.account == sched.account_example
    assert re.fullmatch(sched.account_pattern, S.account)


def test_slurm_conf_cluster_and_global_settings():
    keys = conf_keys(conf.slurm_conf(S))
    assert keys["ClusterName"] == PROFILE.scheduler.cluster_name
    assert keys["SlurmctldHost"] == "host(127.0.0.1)"
    assert keys["TaskPlugin"] == "task/affinity"
    assert keys["SlurmdParameters"] == "config_overrides"
    assert keys["ReturnToService"] == "2"
    assert keys["AccountingStorageEnforce"] == "associations,limits"
    assert keys["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert keys["GresTypes"] == "gpu"
    assert "%n" in keys["SlurmdSpoolDir"] and "%n" in keys["SlurmdPidFile"] and "%n" in keys["SlurmdLogFile"]


def test_slurm_conf_node_lines():
    nodes = [row for row in conf_lines(conf.slurm_conf(S)) if "NodeName" in row]
    assert [n["NodeName"] for n in nodes] == ["node1", "node2"]
    for n in nodes:
        assert n["NodeHostname"] == "host"
        assert n["NodeAddr"] == "127.0.0.1"
        assert n["CPUs"] == n["CoresPerSocket"] == str(PROFILE.node.cores)
        assert n["Gres"] == f"gpu:{PROFILE.node.gpus}"
    assert len({n["Port"] for n in nodes}) == 2  # two slurmd on one host need two ports


def test_slurm_conf_partition_matches_the_profile():
    (part,) = [row for row in conf_lines(conf.slurm_conf(S)) if "PartitionName" in row]
    limits = PROFILE.scheduler.partitions[PROFILE.scheduler.default_partition]
    assert part["PartitionName"] == PROFILE.scheduler.default_partition
    assert part["Nodes"] == "node1,node2"
    assert part["Default"] == "YES"
    assert part["MaxTime"] == limits.max_time
    assert part["MaxNodes"] == str(limits.max_nodes)
    assert part["OverSubscribe"] == "EXCLUSIVE"  # whole_node: true


def test_gres_conf_gives_each_node_its_own_device_files():
    rows = [row for row in conf_lines(conf.gres_conf(S)) if "NodeName" in row]
    files = {row["NodeName"]: row["File"].split(",") for row in rows}
    assert files == {
        "node1": ["/dev/fakegpu0", "/dev/fakegpu1", "/dev/fakegpu2", "/dev/fakegpu3"],
        "node2": ["/dev/fakegpu4", "/dev/fakegpu5", "/dev/fakegpu6", "/dev/fakegpu7"],
    }
    assert all(row["Name"] == "gpu" for row in rows)


def test_slurmdbd_conf_and_sql_agree_and_the_password_file_is_private():
    keys = conf_keys(conf.slurmdbd_conf(S))
    assert keys["StorageType"] == "accounting_storage/mysql"
    sql = conf.database_sql(S)
    assert f"`{keys['StorageLoc']}`" in sql and f"'{keys['StorageUser']}'@'localhost'" in sql
    assert keys["StoragePass"] in sql
    assert "IF NOT EXISTS" in sql
    files = conf.config_files(S)
    assert files[conf.ETC / "slurmdbd.conf"][1] == 0o600
    assert files[conf.ETC / "slurm.conf"] == (conf.slurm_conf(S), 0o644)


def test_config_is_deterministic():
    assert conf.slurm_conf(S) == conf.slurm_conf(LocalSlurmSettings(hostname="host"))


# --- /etc/hosts and parsers --------------------------------------------------------------------


def test_hosts_line_is_added_once():
    text = "127.0.0.1 localhost\n"
    line = conf.hosts_addition(text, S.nodes)
    assert line == "127.0.0.1 node1 node2\n"
    assert conf.hosts_addition(text + line, S.nodes) == ""
    assert conf.hosts_addition("127.0.0.1 localhost node1 # node2\n", S.nodes) == "127.0.0.1 node2\n"


def test_parsers():
    assert parse.parse_installed("munge ii \nslurmd un \nmariadb-server:amd64 ii\n") == {"munge", "mariadb-server"}
    assert parse.parse_node_states("node1 idle\nnode2 down*\n") == {"node1": "idle", "node2": "down*"}
    assert parse.parse_associations("testbed|root|\ntestbed|project_465000858|root\n") == {
        ("testbed", "root", ""),
        ("testbed", "project_465000858", "root"),
    }


@pytest.mark.parametrize(
    ("state", "up"),
    [
        ("idle", True),
        ("mixed", True),
        ("allocated", True),
        ("idle*", False),
        ("down*", False),
        ("drained", False),
        ("inval", False),
        (None, False),
    ],
)
def test_node_is_up(state, up):
    assert parse.node_is_up(state) is up


def test_sudo_user_gets_an_association_too(monkeypatch):
    monkeypatch.setenv("SUDO_USER", "alice")
    assert LocalSlurmSettings.for_this_machine().users == ("root", "alice")
    monkeypatch.delenv("SUDO_USER")
    assert LocalSlurmSettings.for_this_machine().users == ("root",)
