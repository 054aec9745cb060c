"""One matrix on two "clusters", each kept as a DVC experiment, compared by one report
(issue 15): `dvc exp run` of an orchestrated matrix on the `local` profile and on a
profile file of its own, then `orchestrator report --rev A --rev B`.

The training is a stand-in that writes a metrics.json (the report's arithmetic is the
unit tests'); what this proves is the DVC side: each revision's runs are read from git
and DVC's cache without a checkout, a run of the workspace on one cluster leaves the
other's results and rows as they were, and `dvc exp show` / `dvc plots diff` see the
same comparison.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from support import dvc_exp, make_project, run_orchestrator, with_git

from orchestrator.config import profile as profiles

FAKE_TRAINING = """\
import json, os, sys
out, nodes, gpus, speed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
world = nodes * gpus
os.makedirs(os.path.join(out, "model"), exist_ok=True)
open(os.path.join(out, "model", "weights.bin"), "wb").write(os.urandom(1 << 16))  # from DVC's cache, never read by the report
metrics = {
    "tokens_per_second": speed * 1000 * world ** 0.9, "world_size": world, "devices": gpus, "num_nodes": nodes,
    "batch_size": 8, "global_batch_size": 8 * world, "seq_len": 128, "max_steps": 100, "accelerator": "cpu",
    "mean_step_time_s": 0.5 / speed, "torch_version": "2.13.0", "lightning_version": "2.6.6",
}
json.dump(metrics, open(os.path.join(out, "metrics.json"), "w"))
os.makedirs(os.path.join(out, "profile"), exist_ok=True)  # as --profile-steps writes it
operators = {"aten::mm": {"calls": 4, "host_total_us": 800 / speed}, "aten::add": {"calls": 2, "host_total_us": 100}}
json.dump({"steps": 2, "operators": operators}, open(os.path.join(out, "profile", "operators.json"), "w"))
"""

DVC_YAML = """\
stages:
  lm:
    matrix:
      device_cfg: ${lm.device_cfgs}
    cmd: >-
      orchestrator run --nodes ${item.device_cfg.num_nodes} --gpus-per-node ${item.device_cfg.num_gpus} --
      python fake_training.py results/lm/tiny/${item.device_cfg.num_nodes}x${item.device_cfg.num_gpus}
      ${item.device_cfg.num_nodes} ${item.device_cfg.num_gpus} ${lm.speed}
    deps: [fake_training.py]
    params: [lm.speed]
    outs:
      - results/lm/tiny/${item.device_cfg.num_nodes}x${item.device_cfg.num_gpus}/model:
          persist: true
    metrics:
      - results/lm/tiny/${item.device_cfg.num_nodes}x${item.device_cfg.num_gpus}/metrics.json:
          cache: false
          persist: true
  report:
    cmd: orchestrator report lm --out reports --no-accounting
    deps: [results/lm]
    outs: [reports/report.html, reports/summary.md, reports/figures]
    metrics: [reports/report.json]
    plots: [reports/plots/scaling]
"""


def dvc(project, *args: str) -> subprocess.CompletedProcess:
    done = dvc_exp(project, *args, timeout=600)
    assert done.returncode == 0, f"dvc {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """Experiments on-local (the local profile) and on-other (a profile file: another
    cluster, twice as fast), then the workspace run again on local."""
    params = {
        "orchestrator": {"cluster": "local"},
        "lm": {"device_cfgs": [{"num_nodes": 1, "num_gpus": 1}, {"num_nodes": 1, "num_gpus": 2}], "speed": 1.0},
    }
    project = make_project(tmp_path_factory.mktemp("revs") / "p", dvc_yaml=DVC_YAML, params_yaml=yaml.safe_dump(params))
    (project / "fake_training.py").write_text(FAKE_TRAINING)
    other = yaml.safe_load(profiles.load("local").text)
    other.update(name="other-cluster", description="a second cluster for the comparison")
    (project / "other.yaml").write_text(yaml.safe_dump(other))
    with_git(project, "the matrix")
    dvc(project, "exp", "run", "-n", "on-local")
    dvc(project, "exp", "run", "-n", "on-other", "-S", "orchestrator.cluster=other.yaml", "-S", "lm.speed=2")
    first = run_orchestrator("report", "lm", "--rev", "on-local", "--rev", "on-other", "--out", "cmp", "--no-accounting", cwd=project)
    assert first.returncode == 0, first.stderr
    before = json.loads((project / "cmp/report.json").read_text())
    # The workspace again, on local, faster: on-other's results and rows stay as they were.
    dvc(project, "exp", "run", "-n", "on-local-again", "-S", "orchestrator.cluster=local", "-S", "lm.speed=3")
    again = run_orchestrator(
        "report", "lm", "--rev", "on-local-again", "--rev", "on-other", "--out", "cmp2", "--no-accounting", cwd=project
    )
    assert again.returncode == 0, again.stderr
    return project, before, json.loads((project / "cmp2/report.json").read_text())


@pytest.mark.slow
def test_one_report_has_both_clusters_rows_side_by_side(compared):
    project, before, _ = compared
    assert sorted(before) == [f"{rev}:lm@device_cfg{i}" for rev in ("on-local", "on-other") for i in (0, 1)]
    assert before["on-other:lm@device_cfg0"]["throughput"] == pytest.approx(2 * before["on-local:lm@device_cfg0"]["throughput"])
    summary = (project / "cmp/summary.md").read_text()
    assert "### results/lm/tiny: on-local, on-other side by side" in summary
    side = summary.split("side by side", 1)[1].split("###", 1)[0]
    assert "| 1x1 | on-local | local · CPU |" in side and "| 1x1 | on-other | other-cluster · CPU |" in side, side
    assert "hours to 1e+09 tokens" in side and "kWh per 1M tokens" in side
    assert "### results/lm/tiny [on-local]" in summary and "### results/lm/tiny [on-other]" in summary
    figures = sorted(p.name for p in (project / "cmp/figures").iterdir())
    assert "scaling-results-lm-tiny.png" in figures  # one figure, a line per revision
    assert {"steptime-results-lm-tiny--on-local.png", "steptime-results-lm-tiny--on-other.png"} <= set(figures), figures
    page = (project / "cmp/report.html").read_text()
    assert page.count("<figure>") == 3 and "on-other side by side" in page
    assert sorted(p.name for p in (project / "cmp/plots/scaling").iterdir()) == [
        "results-lm-tiny--on-local.csv",
        "results-lm-tiny--on-other.csv",
    ]


@pytest.mark.slow
def test_running_the_workspace_again_on_one_cluster_leaves_the_others_rows(compared):
    project, before, after = compared
    for i in (0, 1):
        assert after[f"on-other:lm@device_cfg{i}"] == before[f"on-other:lm@device_cfg{i}"]
        local = before[f"on-local:lm@device_cfg{i}"]["throughput"]
        assert after[f"on-local-again:lm@device_cfg{i}"]["throughput"] == pytest.approx(3 * local)
    # The workspace holds the last run; the other cluster's outputs are still in DVC's cache.
    assert json.loads((project / "results/lm/tiny/1x1/metrics.json").read_text())["tokens_per_second"] == pytest.approx(3000)


@pytest.mark.slow
def test_dvc_exp_show_and_plots_diff_see_the_same_comparison(compared):
    project, _, _ = compared
    shown = json.loads(dvc(project, "exp", "show", "--json").stdout)
    names = {exp.get("name") for entry in shown for exp in (entry.get("experiments") or []) for exp in exp.get("revs", [])}
    assert {"on-local", "on-other", "on-local-again"} <= names, names
    diff = json.loads(dvc(project, "plots", "diff", "on-local", "on-other", "--json").stdout)["data"]
    (plot,) = diff["reports/plots/scaling/results-lm-tiny.csv"]  # each revision's own report, as DVC plots data
    assert plot["revisions"] == ["on-local", "on-other"]
    points = {(v["rev"], v["config"]): float(v["throughput"]) for v in plot["content"]["data"]["values"]}
    assert points[("on-other", "1x1")] == pytest.approx(2 * points[("on-local", "1x1")]), points


@pytest.mark.slow
def test_a_revision_that_does_not_exist_is_one_message(compared):
    project, _, _ = compared
    done = run_orchestrator("report", "--rev", "on-local", "--rev", "nope", "--out", "bad", "--no-accounting", cwd=project)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "revision 'nope' is neither a git revision nor a DVC experiment" in done.stderr
    assert "on-local" in done.stderr.split("nope", 1)[1]  # the experiments there are named
    assert not (project / "bad").exists()
    repeated = run_orchestrator("report", "--rev", "on-local", "--rev", "on-local", cwd=project)
    assert repeated.returncode == 2 and "--rev on-local named more than once" in repeated.stderr
    for rev, what in (("HEAD:dvc.yaml", "a file"), ("HEAD^{tree}", "a folder")):  # git resolves both; neither is a revision
        done = run_orchestrator("report", "--rev", rev, "--out", "bad", "--no-accounting", cwd=project)
        assert done.returncode == 2 and f"revision {rev!r} names {what} in git, not a commit" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and not (project / "bad").exists()


@pytest.mark.slow
def test_profile_diff_compares_runs_of_two_revisions(compared):
    project, _, _ = compared
    done = run_orchestrator(
        "profile-diff", "on-local:results/lm/tiny/1x1", "on-other:results/lm/tiny/1x1/profile/operators.json", "--json", cwd=project
    )
    assert done.returncode == 0, done.stderr
    mm = next(row for row in json.loads(done.stdout)["rows"] if row["operator"] == "aten::mm")
    assert (mm["baseline_host_us"], mm["exp_host_us"]) == (pytest.approx(800), pytest.approx(400)), mm  # the other cluster twice as fast
    missing = run_orchestrator("profile-diff", "on-local:results/lm/tiny/9x9", "on-other:results/lm/tiny/1x1", cwd=project)
    assert missing.returncode != 0, missing.stderr
    assert "revision on-local has no results/lm/tiny/9x9/profile/operators.json" in missing.stderr, missing.stderr
