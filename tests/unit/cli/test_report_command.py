"""`orchestrator report` on a fabricated results tree (support.fabricate, the `reported` fixture):
the page, the summary and DVC's plots; what is missing when nothing ran; a page that needs no network.
The page in headless Chromium: tests/integration/local/test_report_in_chromium.py."""

from __future__ import annotations

import csv
import json
import re

import pytest
import yaml
from support import REPORT_DVC_YAML, fabricate, invoke, make_project, with_git


def test_cli_writes_the_page_the_summary_and_dvc_plots(reported):
    assert {p.name for p in reported.iterdir()} >= {"report.html", "summary.md", "report.json", "plots", "figures"}
    (data,) = (reported / "plots/scaling").glob("*.csv")
    rows = list(csv.DictReader(data.open()))
    assert [r["config"] for r in rows] == ["1x1", "1x2", "1x4"]  # the missing run is not plotted as 0
    assert [round(float(r["efficiency"]), 3) for r in rows] == [1.0, 0.95, 0.9]
    summary = (reported / "summary.md").read_text()
    assert "| 2x4 (missing) | 8 | — | — | — |" in summary and "weak scaling (per-device batch 16 fixed" in summary
    assert "| 1x4 | 4 | 360 | 3.60x | 90% |" in summary and "| 50.0% |" in summary  # MFU vs JUWELS' 312 TFLOP/s
    metrics = json.loads((reported / "report.json").read_text())
    assert metrics["benchmark@pydoc-topics-tiny-device_cfg3"]["throughput"] is None
    one, two, four = (metrics[f"benchmark@pydoc-topics-tiny-device_cfg{i}"] for i in range(3))
    assert (one["energy_source"], two["energy_source"]) == ("estimate", "sampled")
    assert one["energy_kwh"] == pytest.approx(400 * 600 / 3.6e6) and two["energy_kwh"] == pytest.approx(0.1)
    assert four["emissions_kg"] == pytest.approx(400 * 4 * 600 / 3.6e6 * 1.1 * 380 / 1000)
    assert {p.stem.split("-")[0] for p in (reported / "figures").glob("*.png")} == {"scaling", "steptime", "loss", "energy"}
    energy_rows = list(csv.DictReader((reported / "plots/energy.csv").open()))
    # Every run, a missing one with its energy left empty (never 0).
    assert [(r["config"], r["energy_source"]) for r in energy_rows] == [
        ("1x1", "estimate"),
        ("1x2", "sampled"),
        ("1x4", "estimate"),
        ("2x4", ""),
    ]
    assert energy_rows[-1]["energy_kwh"] == ""


def test_cli_says_what_is_missing_when_nothing_ran(tmp_path):
    project = make_project(
        tmp_path / "p",
        dvc_yaml=REPORT_DVC_YAML,
        params_yaml=yaml.safe_dump({"benchmark": {"datasets": ["d"], "models": ["m"], "device_cfgs": [{"num_nodes": 1, "num_gpus": 1}]}}),
    )
    done = invoke("report", "--project", str(project), "--no-accounting")
    assert (
        done.exit_code == 2
        and "no run has a metrics.json yet" in done.output
        and "no results/benchmark/d/m/1x1/metrics.json" in done.output
        and "run the pipeline first (dvc repro)" in done.output
    )


def _renamed(tmp_path):
    """support.fabricate's results, their throughput written as the team's own `throughput`."""
    project = fabricate(tmp_path / "p")
    for path in project.glob("results/**/metrics.json"):
        metrics = json.loads(path.read_text())
        metrics["train"] = {"throughput": metrics.pop("samples_per_second")}  # nested, as DVCLive writes them
        path.write_text(json.dumps(metrics))
    return project


def test_metrics_by_other_names_are_told_which_the_report_needs_and_how_to_map_them(tmp_path):
    """Before: "no run has metrics with a throughput yet ... run the pipeline first" on runs that had run."""
    project = _renamed(tmp_path)
    done = invoke("report", "--project", str(project), "--no-accounting")
    assert done.exit_code == 2 and "Traceback" not in done.output, done.output
    assert "no run's metrics.json has a throughput: the report needs tokens_per_second or samples_per_second" in done.output
    assert "benchmark@pydoc-topics-tiny-device_cfg0: its metrics.json has accelerator, batch_size" in done.output
    assert "mean_step_time_s, num_nodes, torch_version, train.throughput, world_size" in done.output
    assert "map your own: --metric samples_per_second=KEY" in done.output and "run the pipeline first" not in done.output
    assert not (project / "reports").exists()
    mapped = invoke("report", "--project", str(project), "--no-accounting", "--metric", "samples_per_second=train.throughput")
    assert mapped.exit_code == 0, mapped.output
    assert "3 run(s), 1 missing, weak scaling, baseline 1x1" in mapped.output
    assert "| 1x4 | 4 | 360 | 3.60x | 90% |" in (project / "reports/summary.md").read_text()


@pytest.mark.parametrize(
    ("mapping", "said"),
    [
        ("samples=train.throughput", ["--metric: cannot map these", "the report has no metric 'samples'", "samples_per_second"]),
        ("samples_per_second", ["write NAME=KEY"]),
        ("samples_per_second=train.thruput", ["no run's metrics.json has that key", "the keys the runs have: accelerator,"]),
    ],
)
def test_a_metric_name_the_report_cannot_use_is_one_message_and_writes_nothing(tmp_path, mapping, said):
    project = _renamed(tmp_path)
    done = invoke("report", "--project", str(project), "--no-accounting", "--metric", mapping)
    assert done.exit_code == 2 and "Traceback" not in done.output and all(s in done.output for s in said), done.output
    assert not (project / "reports").exists()


# A project of its own, as Get started's: the metrics dvc.yaml declares, by a name of the user's, in YAML.
SCORES_DVC_YAML = """\
stages:
  train:
    matrix:
      lr: ${train.lrs}
    cmd: orchestrator run -- python train.py --lr ${item.lr}
    metrics:
      - out/${item.lr}/scores.yaml:
          cache: false
"""


def _scores_project(tmp_path, dvc_yaml=SCORES_DVC_YAML):
    params = {"orchestrator": {"cluster": "local"}, "train": {"lrs": [0.1, 0.2]}}
    project = make_project(tmp_path / "p", dvc_yaml=dvc_yaml, params_yaml=yaml.safe_dump(params))
    for lr, speed in (("0.1", 90.0), ("0.2", 80.0)):
        (project / "out" / lr).mkdir(parents=True)
        (project / "out" / lr / "scores.yaml").write_text(f"train:\n  throughput: {speed}\nworld_size: 1\nscore: {lr}\n")
    return project


def test_the_metrics_files_dvc_yaml_declares_are_read_whatever_their_name(tmp_path):
    """Before: "no metrics.json among the outputs" for a stage whose metrics file is out/${item.lr}/scores.yaml."""
    project = _scores_project(tmp_path)
    unmapped = invoke("report", "--project", str(project), "--no-accounting")
    assert unmapped.exit_code == 2 and "no run's scores.yaml has a throughput" in unmapped.output, unmapped.output
    assert "train@0.1: its scores.yaml has score, train.throughput, world_size" in unmapped.output
    # A commit's files (git keeps them: cache: false) and the workspace's as they are, in one report.
    with_git(project, "the scores")
    (project / "out/0.1/scores.yaml").write_text("{broken")
    mapping = ("--metric", "samples_per_second=train.throughput")
    done = invoke("report", "--project", str(project), "--no-accounting", "--rev", "HEAD", "--rev", "workspace", *mapping)
    assert done.exit_code == 0 and "train [HEAD]: 2 run(s), 0 missing" in done.output, done.output
    assert "train [workspace]: 1 run(s), 1 missing" in done.output
    assert "missing: workspace:train@0.1 (out/0.1/scores.yaml is unreadable: " in done.output, done.output
    rows = json.loads((project / "reports/report.json").read_text())
    assert [rows[key]["throughput"] for key in ("HEAD:train@0.1", "HEAD:train@0.2", "workspace:train@0.2")] == [90.0, 80.0, 80.0]


def test_metrics_written_as_plain_outputs_are_named_with_where_the_report_reads(tmp_path):
    project = _scores_project(tmp_path, SCORES_DVC_YAML.replace("metrics:", "outs:"))
    done = invoke("report", "--project", str(project), "--no-accounting")
    assert done.exit_code == 2 and "Traceback" not in done.output, done.output
    assert "no metrics files declared by any stage" in done.output
    assert "outputs that may be your metrics: out/0.1/scores.yaml, out/0.2/scores.yaml" in done.output
    assert "declares under metrics: in dvc.yaml" in done.output


def test_the_page_needs_no_network(reported):
    page = (reported / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*['"]?\s*(https?:)?//""", page, re.IGNORECASE)
    assert "<script" not in page and "@import" not in page and "url(" not in page
    assert page.count("<img src='data:image/png;base64,") == len(list((reported / "figures").glob("*.png")))


def test_a_time_column_of_under_one_token_is_refused_before_anything_is_read(reported):
    project = reported.parent
    for bad in ("0", "-5", "many"):
        done = invoke("report", "--project", str(project), "--no-accounting", "--to", bad, "--out", "bad-to")
        assert done.exit_code == 2 and "Invalid value for '--to'" in done.output, done.output
        assert isinstance(done.exception, SystemExit)  # click's usage error, no traceback
        assert not (project / "bad-to").exists()
