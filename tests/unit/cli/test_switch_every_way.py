"""Every way of pointing a project at a cluster runs that cluster's values or nothing (issue 34): params.yaml's
orchestrator.cluster set by hand (what `dvc exp run -S orchestrator.cluster=NAME` does too), `submit --cluster`,
`sweep --cluster`, `submit --remote`, and a profile file of one's own, naming a built-in or bringing its own
`clusters` entry. Unswitched, each is one message naming `orchestrator use`, exit 2, and no Slurm command,
nothing sent, no sweep copy. Slurm's commands here are recorders that fail the test if called."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from support import ACCOUNT, ROOT, invoke, make_project

DVC_YAML = """\
stages:
  work:
    matrix:
      seed: ${work.seeds}
    cmd: orchestrator run -- python3 -c "print(${item.seed})"
    params: [work]
"""
PARAMS = {
    "orchestrator": {"cluster": "local", "account": ACCOUNT},
    "work": {"seeds": [0]},
    "clusters": {"testbed": {"work": {"seeds": [1, 2]}}},
}
SLURM = ("sbatch", "srun", "squeue", "sacct", "scontrol", "sinfo", "sacctmgr", "scancel")


@pytest.fixture
def proj(tmp_path, monkeypatch):
    """A git + DVC project whose clusters.testbed has another matrix, committed, as the current folder; Slurm's
    commands record that they were called."""
    root = make_project(tmp_path / "p", dvc_yaml=DVC_YAML, params_yaml=yaml.safe_dump(PARAMS))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in SLURM:
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{tmp_path}/slurm-called"\nexit 1\n')
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    for key, value in {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}.items():
        monkeypatch.setenv(key, value)
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "p"]):
        subprocess.run(argv, cwd=root, check=True, capture_output=True)
    monkeypatch.chdir(root)
    return root


def refused(result, switch: str = "orchestrator use testbed") -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.output.count("error:") == 1, result.output
    assert f"`{switch}`" in result.output and "work.seeds: [0] here, [1, 2] on" in result.output, result.output
    return result.output


def nothing_happened(root, before: str) -> None:
    assert not (root.parent / "slurm-called").exists(), (root.parent / "slurm-called").read_text()
    assert (root / "params.yaml").read_text() == before
    assert not (root / ".orchestrator" / "sweeps").exists() and not list((root / ".orchestrator").glob("ledger*"))
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=root, capture_output=True, text=True, check=True).stdout
    assert len(worktrees.splitlines()) == 1, worktrees


def test_orchestrator_cluster_set_by_hand_runs_nothing(proj, monkeypatch):
    data = {**PARAMS, "orchestrator": {**PARAMS["orchestrator"], "cluster": "testbed"}}  # as `dvc exp run -S` sets it
    (proj / "params.yaml").write_text(yaml.safe_dump(data))
    before = (proj / "params.yaml").read_text()
    monkeypatch.setenv("DVC_ROOT", str(proj))
    monkeypatch.setenv("DVC_STAGE", "work@0")  # as dvc repro runs the stage DVC resolved from the base
    refused(invoke("run", "--", "python3", "-c", "print(0)"))
    monkeypatch.delenv("DVC_STAGE")
    refused(invoke("submit"))
    nothing_happened(proj, before)


def test_submit_and_sweep_with_cluster_run_nothing_until_switched(proj):
    before = (proj / "params.yaml").read_text()
    refused(invoke("submit", "--cluster", "testbed"))
    out = refused(invoke("sweep", "--cluster", "testbed", "-S", "orchestrator.account=a,b"))
    assert out.count("orchestrator use testbed") == 1  # said once, not once per point
    nothing_happened(proj, before)


def test_submit_remote_sends_nothing_until_switched(proj, monkeypatch):
    sent: list = []
    monkeypatch.setattr("orchestrator.cli.jobs.run_remote", lambda *args, **kw: sent.append(args))
    before = (proj / "params.yaml").read_text()
    refused(invoke("submit", "--remote", "--cluster", "testbed"))
    assert sent == []
    nothing_happened(proj, before)
    assert invoke("use", "testbed").exit_code == 0
    assert invoke("submit", "--remote", "--cluster", "testbed").exit_code == 0 and len(sent) == 1  # switched: sent


def test_a_profile_file_naming_a_built_in_takes_its_entry(proj):
    mine = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())  # name: testbed, copied
    (proj / "mine.yaml").write_text(yaml.safe_dump(mine))
    before = (proj / "params.yaml").read_text()
    refused(invoke("submit", "--cluster", "mine.yaml"), switch="orchestrator use mine.yaml")
    nothing_happened(proj, before)
    assert invoke("use", "mine.yaml").exit_code == 0
    data = yaml.safe_load((proj / "params.yaml").read_text())
    assert data["work"] == {"seeds": [1, 2]} and data["orchestrator"]["cluster"] == "mine.yaml"


def test_a_profile_file_with_an_entry_of_its_own(proj):
    site = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    site["name"] = "mysite"
    (proj / "site.yaml").write_text(yaml.safe_dump(site))
    data = {**PARAMS, "clusters": {"site.yaml": {"work": {"seeds": [1, 2]}}}}
    (proj / "params.yaml").write_text(yaml.safe_dump(data))
    before = (proj / "params.yaml").read_text()
    refused(invoke("submit", "--cluster", "site.yaml"), switch="orchestrator use site.yaml")
    nothing_happened(proj, before)
    assert invoke("use", "site.yaml").exit_code == 0
    assert yaml.safe_load((proj / "params.yaml").read_text())["work"] == {"seeds": [1, 2]}
