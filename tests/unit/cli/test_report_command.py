"""`orchestrator report` on a fabricated results tree (support.fabricate, the `reported` fixture):
the page, the summary and DVC's plots; what is missing when nothing ran; a page that needs no network.
The page in headless Chromium: tests/integration/local/test_report_in_chromium.py."""

from __future__ import annotations

import csv
import json
import re

import pytest
import yaml
from support import REPORT_DVC_YAML, invoke, make_project


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
        and "no run has metrics with a throughput yet" in done.output
        and "no results/benchmark/d/m/1x1/metrics.json" in done.output
    )


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
