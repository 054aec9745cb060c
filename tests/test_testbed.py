"""The Slurm testbed: pure config generation (anywhere) and the real cluster (marked slurm)."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from click.testing import CliRunner

from orchestrator.cli import testbed as cli
from orchestrator.config import profile
from orchestrator.slurm import times
from orchestrator.testbed import cluster, conf, parse
from orchestrator.testbed.settings import Settings
from orchestrator.util.runner import Completed

S = Settings(hostname="host")
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


# --- pure: settings match the profile ---------------------------------------------------


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
    assert conf.slurm_conf(S) == conf.slurm_conf(Settings(hostname="host"))


# --- pure: /etc/hosts and parsers ---------------------------------------------------------


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
    assert Settings.for_this_machine().users == ("root", "alice")
    monkeypatch.delenv("SUDO_USER")
    assert Settings.for_this_machine().users == ("root",)


class Recorder:
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


def test_up_without_root_fails_clearly_before_running_anything(monkeypatch):
    monkeypatch.setattr(cluster.os, "geteuid", lambda: 1000)
    runner = Recorder()
    with pytest.raises(cluster.TestbedError, match="testbed up needs root"):
        cluster.Testbed(S, runner).up()
    assert runner.calls == []
    from orchestrator.cli import main

    result = CliRunner().invoke(main, ["testbed", "up"])
    assert result.exit_code == 1
    assert "needs root" in result.output


@pytest.mark.parametrize(("rows", "code"), [([("munge", True, "")], 0), ([("munge", True, ""), ("node1", False, "")], 1)])
def test_status_exit_code(monkeypatch, rows, code):
    monkeypatch.setattr(cluster.Testbed, "status", lambda self: rows)
    result = CliRunner().invoke(cli.testbed, ["status"])
    assert result.exit_code == code
    assert result.output.splitlines()[0].split()[:2] == ["munge", "up"]


def test_status_has_one_row_per_configured_node():
    settings = Settings(hostname="host", nodes=("a", "b", "c"))
    rows = cluster.Testbed(settings, Recorder()).status()
    assert [name for name, _, _ in rows] == list(settings.components)
    assert settings.components == ("munge", "mariadb", "slurmdbd", "slurmctld", "a", "b", "c", "account")


def test_failed_command_names_the_command_and_log(tmp_path):
    class Failing(Recorder):
        def run(self, argv, *, input=None, timeout=None):
            return Completed(tuple(argv), 1, "", "slurmctld: fatal: bad config")

    log = tmp_path / "slurmctld.log"
    log.write_text("error: something\n")
    with pytest.raises(cluster.TestbedError) as err:
        cluster.Testbed(S, Failing()).run(["slurmctld"], log=log)
    text = err.value.render()
    assert "`slurmctld` failed (exit 1)" in text and "fatal: bad config" in text and str(log) in text


# --- the real cluster ---------------------------------------------------------------------

ACCOUNT = Settings().account


def run(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=check)


@pytest.mark.slurm
def test_batch_job_runs_and_is_accounted(slurm_testbed, tmp_path):
    out = tmp_path / "job.out"
    submitted = run(
        "sbatch", f"--account={ACCOUNT}", "--wait", "--parsable", f"--output={out}", "--wrap", "echo hello from $SLURMD_NODENAME"
    )
    job = submitted.stdout.strip().split(";")[0]
    assert re.search(r"hello from node[12]", out.read_text())
    # slurmctld hands the record to slurmdbd asynchronously: allow a few seconds.
    deadline, record = time.monotonic() + 30, ""
    while time.monotonic() < deadline:
        record = run("sacct", "-j", job, "-X", "-n", "-P", "-o", "JobID,Account,State").stdout.strip()
        if record.endswith("COMPLETED"):
            break
        time.sleep(0.5)
    assert record == f"{job}|{ACCOUNT}|COMPLETED"


@pytest.mark.slurm
def test_unknown_account_is_refused(slurm_testbed):
    refused = run("sbatch", "--account=nope", "--wrap", "true", check=False)
    assert refused.returncode != 0
    assert "Invalid account" in refused.stderr


@pytest.mark.slurm
def test_cpu_masks_apply_on_both_nodes(slurm_testbed):
    script = 'echo "$SLURMD_NODENAME $SLURM_LOCALID $(grep Cpus_allowed_list /proc/self/status)"'
    out = run("srun", f"--account={ACCOUNT}", "-N2", "--ntasks-per-node=2", "--cpu-bind=mask_cpu:0x1,0x2", "sh", "-c", script).stdout
    seen = sorted(tuple(line.split()[:2] + line.split()[-1:]) for line in out.splitlines())
    assert seen == [("node1", "0", "0"), ("node1", "1", "1"), ("node2", "0", "0"), ("node2", "1", "1")]


@pytest.mark.slurm
def test_each_node_has_four_gpus(slurm_testbed):
    out = run("srun", f"--account={ACCOUNT}", "-N2", "--gres=gpu:4", "sh", "-c", 'echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"').stdout
    assert sorted(out.splitlines()) == ["node1 0,1,2,3", "node2 0,1,2,3"]


@pytest.mark.slurm
def test_up_again_is_quick(slurm_testbed):
    start = time.monotonic()
    result = CliRunner().invoke(cli.testbed, ["up"])
    elapsed = time.monotonic() - start
    assert result.exit_code == 0, result.output
    assert elapsed < 10, f"`testbed up` on a running testbed took {elapsed:.1f} s"


@pytest.mark.slurm
def test_status_says_all_up(slurm_testbed):
    result = CliRunner().invoke(cli.testbed, ["status"])
    assert result.exit_code == 0, result.output
    assert [line.split()[:2] for line in result.output.splitlines()] == [[name, "up"] for name in slurm_testbed.components]
