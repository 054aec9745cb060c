"""The scaling report: efficiency arithmetic on fixed inputs, missing runs shown as missing,
MFU against the profile's peak, the CLI on a fabricated results tree, and the page in
headless Chromium (every figure rendered, nothing fetched)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import make_project, require_root_and_apt, skip_or_fail

from orchestrator.analysis import energy, mfu, runs, scaling
from orchestrator.analysis import report as rp
from orchestrator.cli import main
from orchestrator.config import profile

# --- arithmetic --------------------------------------------------------------------


def test_speedup_and_efficiency_against_the_smallest_configuration():
    points = [scaling.Point(1, 100.0), scaling.Point(2, 190.0), scaling.Point(4, 360.0), scaling.Point(8, 640.0)]
    scaled = scaling.scale(points)
    assert [s.speedup for s in scaled] == pytest.approx([1.0, 1.9, 3.6, 6.4])
    assert [s.ideal for s in scaled] == [1.0, 2.0, 4.0, 8.0]
    assert [s.efficiency for s in scaled] == pytest.approx([1.0, 0.95, 0.9, 0.8])


def test_a_missing_smallest_run_moves_the_baseline_and_stays_missing():
    points = [scaling.Point(1, None), scaling.Point(2, 200.0), scaling.Point(8, 560.0)]
    scaled = scaling.scale(points)
    assert scaling.baseline_index(points) == 1
    assert scaled[0] == scaling.Scaled(None, None, None)  # missing, not 0
    assert scaled[1].efficiency == 1.0 and scaled[2].speedup == pytest.approx(2.8) and scaled[2].efficiency == pytest.approx(0.7)
    assert scaling.scale([scaling.Point(1, None)]) == [scaling.Scaled(None, None, None)]


@pytest.mark.parametrize(
    ("batches", "mode"),
    [
        ([(16, 16), (16, 32), (16, 64)], "weak"),  # per-device batch fixed, global grows
        ([(64, 64), (32, 64), (16, 64)], "strong"),  # global batch fixed
        ([(16, 16), (32, 64), (16, 64)], "mixed"),
        ([(None, None), (16, 32), (16, 64)], "mixed"),  # a run that does not say
    ],
)
def test_weak_or_strong_scaling_is_read_from_the_batches(batches, mode):
    points = [scaling.Point(g, 1.0, b, gb) for g, (b, gb) in zip((1, 2, 4), batches, strict=True)]
    assert scaling.scaling_mode(points) == mode
    assert scaling.scaling_mode(points[:1]) == "single"


def test_mfu_uses_the_profiles_peak_else_the_runs_own():
    lm = {"tokens_per_second": 8000.0, "flops_per_token": 6 * 125e6, "world_size": 4, "mfu": 0.9, "mfu_peak_source": "ORCH_PEAK_TFLOPS"}
    value, note = mfu.mfu(lm, 312.0, "juwels-booster")
    assert value == pytest.approx(8000 * 6 * 125e6 / 4 / 312e12) and "juwels-booster's peak 312" in note
    assert mfu.mfu({"model_tflops_per_device": 95.75}, 191.5, "lumi")[0] == pytest.approx(0.5)
    assert mfu.mfu({"model_flops_per_second": 2 * 156e12, "world_size": 2}, 312.0, "x")[0] == pytest.approx(0.5)
    assert mfu.mfu(lm, None, "local") == (0.9, "the run's own (ORCH_PEAK_TFLOPS); local gives no peak")
    assert mfu.mfu({"samples_per_second": 10.0}, 312.0, "x") == (None, "the metrics carry no model FLOPs")


# --- building a report from runs ---------------------------------------------------------


def run(config: str, metrics: dict | None, item: str | None = None, prov: dict | None = None) -> runs.Run:
    nodes, gpus = (int(x) for x in config.split("x"))
    expected = runs.Expected(item or f"bench@{config}", "bench", f"results/bench/ds/m/{config}", nodes, gpus)
    return runs.Run(expected, metrics, prov, {}, None if metrics is not None else f"no metrics.json at results/bench/ds/m/{config}")


def weak(gpus: int, throughput: float, **extra) -> dict:
    return {"samples_per_second": throughput, "world_size": gpus, "devices": gpus, "batch_size": 16, "global_batch_size": 16 * gpus, **extra}


def test_a_run_without_metrics_is_reported_missing_never_zero():
    juwels = profile.load("juwels-booster").profile
    runs = [run("1x1", weak(1, 100.0)), run("1x2", None), run("1x4", weak(4, 360.0))]
    report = rp.build(runs, {r.expected.item: juwels for r in runs}, None, rp.Overrides(), "juwels-booster")
    (series,) = report.series
    assert series.name == "results/bench/ds/m" and series.mode == "weak" and series.baseline == "1x1"
    missing = series.rows[1]
    assert missing.run.missing and missing.throughput is None and missing.scaled.efficiency is None
    assert missing.energy.kwh is None and missing.emissions.kg is None and missing.mfu is None
    assert [r.item for r in report.missing] == ["bench@1x2"]
    assert series.rows[2].scaled.efficiency == pytest.approx(0.9)

    from orchestrator.analysis import report_write

    header, rows = report_write.table(series)
    cells = dict(zip(header, rows[1], strict=True))
    assert cells["config"] == "1x2 (missing)"
    assert all(cells[h] == "—" for h in ("samples/s", "speedup", "efficiency", "energy (kWh)", "CO2e (kg)"))
    assert "missing: 1x2 (bench@1x2): no metrics.json at" in report_write.markdown(report)
    as_json = rp.metrics_of(report)["bench@1x2"]
    assert as_json["missing"] is True and as_json["throughput"] is None and as_json["efficiency"] is None and as_json["energy_kwh"] is None


def test_energy_sources_per_run_and_overrides():
    juwels = profile.load("juwels-booster").profile
    slurm = {"backend": "slurm", "job_id": "900", "elapsed_s": 600, "requeues": 0}
    runs = [
        run("1x1", weak(1, 100.0), prov=slurm),  # accounting has it
        run("1x2", weak(2, 190.0, gpu_energy_j=3.6e6, power_source="nvml-energy"), prov={**slurm, "job_id": "901"}),  # sampled
        run("1x4", weak(4, 360.0), prov={**slurm, "job_id": "902", "requeues": 1}),  # estimated
    ]
    acct = energy.Accounting("acct_gather_energy/ipmi", "juwels", energy.parse_sacct_energy("900|COMPLETED|600|7200000\n901|COMPLETED|600|0\n"))
    report = rp.build(runs, {r.expected.item: juwels for r in runs}, acct, rp.Overrides(carbon_intensity_g_per_kwh=0.0), "juwels-booster")
    a, s, e = report.series[0].rows
    assert (a.energy.source, a.energy.kwh, a.energy.scope) == ("accounting", 2.0, "node")
    assert (s.energy.source, s.energy.kwh) == ("sampled", 1.0) and "recorded no energy for job 901" in s.energy.note
    assert e.energy.source == "estimate" and e.energy.kwh == pytest.approx(400 * 4 * 600 / 3.6e6)
    assert "last of 2 runs only" in e.energy.note  # requeued, elapsed known for the last run only
    assert a.emissions.kg == 0.0 and a.emissions.pue == 1.1  # intensity overridden, PUE from the profile
    assert "--carbon-intensity" in a.emissions.note and "PUE from juwels-booster's site" in a.emissions.note
    elsewhere = rp.build(runs[:1], {runs[0].expected.item: juwels}, energy.Accounting("acct_gather_energy/ipmi", "lumi", acct.jobs), rp.Overrides(), "x")
    assert elsewhere.series[0].rows[0].energy.source == "estimate"  # another cluster's job ids are not looked up


# --- the CLI on a fabricated results tree ---------------------------------------------------

DVC_YAML = """\
stages:
  benchmark:
    matrix:
      dataset: ${benchmark.datasets}
      model: ${benchmark.models}
      device_cfg: ${benchmark.device_cfgs}
    cmd: >-
      orchestrator run --nodes ${item.device_cfg.num_nodes} --gpus-per-node ${item.device_cfg.num_gpus} --
      python -m experiments.classify --dataset ${item.dataset} --model ${item.model}
      --output results/benchmark/${item.dataset}/${item.model}/${item.device_cfg.num_nodes}x${item.device_cfg.num_gpus}
    outs:
      - results/benchmark/${item.dataset}/${item.model}/${item.device_cfg.num_nodes}x${item.device_cfg.num_gpus}/model:
          persist: true
    metrics:
      - results/benchmark/${item.dataset}/${item.model}/${item.device_cfg.num_nodes}x${item.device_cfg.num_gpus}/metrics.json:
          cache: false
          persist: true
"""
CONFIGS = [(1, 1, 100.0), (1, 2, 190.0), (1, 4, 360.0), (2, 4, None)]  # 2x4 never produced metrics


def fabricate(root: Path) -> Path:
    params = {
        "orchestrator": {"cluster": "local"},
        "benchmark": {"datasets": ["pydoc-topics"], "models": ["tiny"], "device_cfgs": [{"num_nodes": n, "num_gpus": g} for n, g, _ in CONFIGS]},
    }
    project = make_project(root, dvc_yaml=DVC_YAML, params_yaml=yaml.safe_dump(params))
    for i, (nodes, gpus, throughput) in enumerate(CONFIGS):
        if throughput is None:
            continue
        folder = project / f"results/benchmark/pydoc-topics/tiny/{nodes}x{gpus}"
        world = nodes * gpus
        metrics = weak(world, throughput, num_nodes=nodes, mean_step_time_s=16 * world / throughput, torch_version="2.13.0", lightning_version="2.6.6")
        metrics["accelerator"] = "gpu"
        if gpus == 2:
            metrics.update(gpu_energy_j=3.6e5, power_source="nvml-energy")
        if gpus == 4:
            metrics.update(model_tflops_per_device=156.0, profile_forward_s=0.05, profile_backward_s=0.1)
        (folder / "dvclive/plots/metrics/train").mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps(metrics))
        prov = {"item": f"benchmark@pydoc-topics-tiny-device_cfg{i}", "backend": "slurm", "job_id": str(500 + i), "elapsed_s": 600, "requeues": 0}
        prov.update(profile="juwels-booster", profile_source="built-in", nodes=nodes)
        (folder / "provenance.json").write_text(json.dumps(prov))
        steps = "\n".join(f"{s}\t{2.0 - s / 100 - i / 50}" for s in range(1, 31))
        (folder / "dvclive/plots/metrics/train/loss.tsv").write_text(f"step\tloss\n{steps}\n")
    return project


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> Path:
    project = fabricate(tmp_path_factory.mktemp("report") / "project")
    done = CliRunner().invoke(main, ["report", "--project", str(project), "--no-accounting"])
    assert done.exit_code == 0, done.output
    assert "1 missing, weak scaling, baseline 1x1" in done.output and "missing: benchmark@pydoc-topics-tiny-device_cfg3" in done.output
    return project / "reports"


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
    assert [(r["config"], r["energy_source"]) for r in energy_rows] == [("1x1", "estimate"), ("1x2", "sampled"), ("1x4", "estimate"), ("2x4", "")]
    assert energy_rows[-1]["energy_kwh"] == ""


def test_cli_says_what_is_missing_when_nothing_ran(tmp_path):
    project = make_project(tmp_path / "p", dvc_yaml=DVC_YAML, params_yaml=yaml.safe_dump({"benchmark": {"datasets": ["d"], "models": ["m"], "device_cfgs": [{"num_nodes": 1, "num_gpus": 1}]}}))
    done = CliRunner().invoke(main, ["report", "--project", str(project), "--no-accounting"])
    assert done.exit_code == 2 and "no run has metrics with a throughput yet" in done.output and "no results/benchmark/d/m/1x1/metrics.json" in done.output


def test_the_page_needs_no_network(reported):
    page = (reported / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*['"]?\s*(https?:)?//""", page, re.IGNORECASE)
    assert "<script" not in page and "@import" not in page and "url(" not in page
    assert page.count("<img src='data:image/png;base64,") == len(list((reported / "figures").glob("*.png")))


# --- the page in headless Chromium ----------------------------------------------------------

CHECK_IMAGES = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const bad = imgs.filter(i => !i.complete || i.naturalWidth === 0).map(i => i.alt);
  const marker = document.createElement('pre');
  marker.id = 'image-check';
  marker.textContent = 'images=' + imgs.length + ' broken=' + bad.length + ' [' + bad.join('|') + ']';
  document.body.appendChild(marker);
});
</script>"""


def chromium() -> str:
    path = shutil.which("chromium") or (os.access("/usr/bin/chromium", os.X_OK) and "/usr/bin/chromium")
    if path:
        return path
    if os.environ.get("CI") != "true":
        pytest.skip("Debian's chromium is not installed (under CI=true the test installs it: apt-get install -y chromium)")
    require_root_and_apt("installing chromium")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True, timeout=600)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"], check=True, env=env, capture_output=True, timeout=1200)
    path = shutil.which("chromium")
    if not path:
        skip_or_fail("apt-get installed chromium but there is no chromium command")
    return path


def headless(browser: str, profile_dir: Path, *args: str) -> subprocess.CompletedProcess:
    # --no-sandbox: tests run as root in containers, where Chromium's sandbox cannot start.
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile_dir}", "--hide-scrollbars", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_every_figure_renders_in_headless_chromium(reported, tmp_path):
    browser = chromium()
    page = (reported / "report.html").read_text()
    # The shipped page has no scripts; a copy gets one that reports every image's natural size.
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", CHECK_IMAGES + "</body>"))
    dom = headless(browser, tmp_path / "profile1", "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    m = re.search(r"images=(\d+) broken=(\d+) \[(.*?)\]", dom.stdout)
    assert m, f"no marker in Chromium's DOM dump:\n{dom.stdout[-2000:]}\n{dom.stderr[-2000:]}"
    figures = len(list((reported / "figures").glob("*.png")))
    assert (int(m.group(1)), int(m.group(2))) == (figures, 0), f"broken images: {m.group(3)}"

    shot = tmp_path / "page.png"
    done = headless(browser, tmp_path / "profile2", "--window-size=1280,4000", f"--screenshot={shot}", (reported / "report.html").as_uri())
    assert shot.is_file(), done.stderr[-2000:]
    from PIL import Image

    with Image.open(shot) as image:
        colors = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colors is None or len(colors) > 50, "the screenshot is blank"
