"""Bringing the testbed up and asking how it stands (orchestrator/testbed/cluster.py, the
`testbed` command), with its commands recorded instead of run. The real cluster:
tests/integration/slurm/test_testbed_cluster.py."""

from __future__ import annotations

import pytest
from fakes import FailingRunner, RecordingRunner
from support import invoke

from orchestrator.testbed import cluster
from orchestrator.testbed.settings import LocalSlurmSettings

S = LocalSlurmSettings(hostname="host")


def test_up_without_root_fails_clearly_before_running_anything(monkeypatch):
    monkeypatch.setattr(cluster.os, "geteuid", lambda: 1000)
    runner = RecordingRunner()
    with pytest.raises(cluster.TestbedError, match="testbed up needs root"):
        cluster.Testbed(S, runner).up()
    assert runner.calls == []
    result = invoke("testbed", "up")
    assert result.exit_code == 1
    assert "needs root" in result.output


@pytest.mark.parametrize(("rows", "code"), [([("munge", True, "")], 0), ([("munge", True, ""), ("node1", False, "")], 1)])
def test_status_exit_code(monkeypatch, rows, code):
    monkeypatch.setattr(cluster.Testbed, "status", lambda self: rows)
    result = invoke("testbed", "status")
    assert result.exit_code == code
    assert result.output.splitlines()[0].split()[:2] == ["munge", "up"]


def test_status_has_one_row_per_configured_node():
    settings = LocalSlurmSettings(hostname="host", nodes=("a", "b", "c"))
    rows = cluster.Testbed(settings, RecordingRunner()).status()
    assert [name for name, _, _ in rows] == list(settings.components)
    assert settings.components == ("munge", "mariadb", "slurmdbd", "slurmctld", "a", "b", "c", "account")


def test_failed_command_names_the_command_and_log(tmp_path):
    log = tmp_path / "slurmctld.log"
    log.write_text("error: something\n")
    with pytest.raises(cluster.TestbedError) as err:
        cluster.Testbed(S, FailingRunner()).run(["slurmctld"], log=log)
    text = err.value.render()
    assert "`slurmctld` failed (exit 1)" in text and "fatal: bad config" in text and str(log) in text
