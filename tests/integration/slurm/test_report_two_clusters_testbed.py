"""Issue 15's acceptance on this machine: the shipped matrix (its `benchmark` stage) run on the
`local` profile and on the testbed's Slurm, each kept as a DVC experiment, then one report
of both; the workspace run again on one cluster leaves the other's rows as they were.
Issue 34's too: the testbed's experiment runs its own matrix (params.yaml's clusters.testbed,
through `orchestrator exp run --cluster testbed`), and the report shows each with its own."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml
from support import ROOT, dvc_exp, make_project, run_orchestrator, with_git

ACCOUNT = "project_465000858"


def exp_run(project, name: str, *settings: str) -> None:
    done = dvc_exp(project, "exp", "run", "-n", name, *(a for s in settings for a in ("-S", s)), "benchmark", timeout=1200)
    assert done.returncode == 0, f"{name}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def exp_run_on(project, name: str, cluster: str) -> None:
    done = run_orchestrator("exp", "run", "--cluster", cluster, "-n", name, "benchmark", cwd=project, timeout=1200)
    assert done.returncode == 0, f"{name}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def report(project, out: str, *revs: str) -> dict:
    done = run_orchestrator("report", "benchmark", *(a for r in revs for a in ("--rev", r)), "--out", out, cwd=project, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads((project / out / "report.json").read_text())


@pytest.mark.slow
def test_the_shipped_matrix_on_local_and_on_the_testbed_in_one_report(slurm_testbed, tmp_path):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["orchestrator"].update(cluster="local", account=ACCOUNT)
    params["benchmark"].update(device_cfgs=[{"num_nodes": 1, "num_gpus": 1}, {"num_nodes": 1, "num_gpus": 2}], max_steps=8, time="00:10:00")
    project = make_project(tmp_path / "p", dvc_yaml=(ROOT / "dvc.yaml").read_text(), params_yaml=yaml.safe_dump(params, sort_keys=False))
    shutil.copytree(ROOT / "experiments", project / "experiments", ignore=shutil.ignore_patterns("__pycache__"))
    with_git(project, "the shipped pipeline")

    exp_run(project, "on-local")
    # The cluster alone, as before the overlay was applied, runs nothing there (its matrix differs).
    refused = dvc_exp(project, "exp", "run", "-n", "wrong", "-S", "orchestrator.cluster=testbed", "benchmark", timeout=600)
    assert refused.returncode != 0 and "orchestrator use testbed" in refused.stdout + refused.stderr
    subprocess.run(["git", "checkout", "--", "params.yaml"], cwd=project, check=True)
    exp_run_on(project, "on-testbed", "testbed")  # clusters.testbed: device_cfgs 1x2 and 2x2
    # What the testbed's accounting said of each job travels in its provenance (a report from
    # elsewhere cannot ask this cluster's sacct): every run, ended, with its elapsed time.
    # (The local run's 1x1 folder stays beside them: its outputs persist, and the testbed's matrix has no 1x1.)
    provenances = [json.loads(p.read_text()) for p in (project / "results/benchmark").rglob("provenance.json")]
    on_testbed = [p for p in provenances if p.get("profile") == "testbed"]
    assert len(on_testbed) == 2, provenances
    for prov in on_testbed:
        kept = prov["accounting"]
        assert kept["cluster"] == "testbed" and kept["runs"][-1]["state"] == "COMPLETED", kept
        assert isinstance(kept["runs"][-1]["elapsed_s"], int), kept
    both = report(project, "cmp", "on-local", "on-testbed")

    items = [f"benchmark@pydoc-topics-tiny-device_cfg{i}" for i in (0, 1)]
    assert sorted(both) == sorted(f"{rev}:{item}" for rev in ("on-local", "on-testbed") for item in items)
    assert not any(row["missing"] for row in both.values()) and all(row["throughput"] > 0 for row in both.values())
    summary = (project / "cmp/summary.md").read_text()
    side = summary.split("on-local, on-testbed side by side", 1)[1].split("\n### ", 1)[0]
    for local_config, testbed_config in (("1x1", "1x2"), ("1x2", "2x2")):  # each experiment with its own matrix
        assert f"| {local_config} | on-local | local · " in side and f"| {testbed_config} | on-testbed | testbed · " in side, side
    figures = {p.name for p in (project / "cmp/figures").iterdir()}
    series = "results-benchmark-pydoc-topics-tiny"
    assert {f"scaling-{series}.png", f"steptime-{series}--on-local.png", f"steptime-{series}--on-testbed.png"} <= figures, figures
    # Every number traceable: each testbed row names its Slurm job and the commit, read from the experiment's provenance.
    page = (project / "cmp/report.html").read_text()
    assert page.count("(slurm, profile testbed)") == 2 and page.count("(local, profile local)") == 2, page[-3000:]

    # The workspace again, on local only: the testbed's experiment and rows stay as they were.
    # One item is enough to run again (each one trained costs a process's ~8 s of CPU).
    subprocess.run(["git", "checkout", "--", "params.yaml"], cwd=project, check=True)  # dvc exp run left the testbed's values
    one_item = "benchmark.device_cfgs=[{num_nodes: 1, num_gpus: 1}]"
    exp_run(project, "on-local-again", "orchestrator.cluster=local", "benchmark.seed=7", one_item)
    again = report(project, "cmp2", "on-local-again", "on-testbed")
    assert sorted(again) == sorted([f"on-local-again:{items[0]}", *(f"on-testbed:{item}" for item in items)])
    assert not again[f"on-local-again:{items[0]}"]["missing"]
    for item in items:
        assert again[f"on-testbed:{item}"] == both[f"on-testbed:{item}"]
