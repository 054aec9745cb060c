"""The report's page (the `reported` fixture: `orchestrator report` of a fabricated results tree)
in headless Chromium: every figure rendered, nothing fetched."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import machine_lock, require_root_and_apt, skip_or_fail

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
    with machine_lock():  # another worker may be installing it, or another package
        if not shutil.which("chromium"):
            subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True, timeout=600)
            argv = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"]
            subprocess.run(argv, check=True, env=env, capture_output=True, timeout=1200)
    path = shutil.which("chromium")
    if not path:
        skip_or_fail("apt-get installed chromium but there is no chromium command")
    return path


def headless(browser: str, profile_dir: Path, *args: str) -> subprocess.CompletedProcess:
    # --no-sandbox: tests run as root in containers, where Chromium's sandbox cannot start.
    argv = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={profile_dir}",
        "--hide-scrollbars",
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_every_figure_renders_in_headless_chromium(reported, tmp_path):
    check_page(reported, tmp_path)


def test_a_comparison_of_two_clusters_renders_in_headless_chromium(tmp_path):
    """Two revisions of one series (LUMI's and JUWELS Booster's runs): the side-by-side table,
    the one scaling figure with a line per revision, each revision's own sections."""
    from support import weak

    from orchestrator.analysis import report, report_write, runs
    from orchestrator.config import profile

    made, profiles = [], {}
    for source, name, speed, partition in (("on-lumi", "lumi", 1.0, "standard-g"), ("on-juwels", "juwels-booster", 1.3, "booster")):
        for nodes, gpus in ((1, 4), (2, 4), (4, 4)):
            config, world = f"{nodes}x{gpus}", nodes * gpus
            expected = runs.Expected(f"lm@{config}", "lm", f"results/lm/tiny/{config}", nodes, gpus)
            metrics = weak(world, speed * 1000 * world**0.95, accelerator="gpu", max_steps=100, mean_step_time_s=0.2 / speed)
            metrics.update(model_tflops_per_device=100.0 * speed)
            prov = {"backend": "slurm", "job_id": str(len(made)), "elapsed_s": 1800, "partition": partition, "nodes": nodes}
            run = runs.Run(expected, metrics, {**prov, "profile": name, "profile_source": "built-in"}, {}, None, source)
            made.append(run)
            profiles[run.key] = profile.load(name).profile
    built = report.build(made, profiles, None, report.Overrides(), "on-lumi, on-juwels")
    report_write.write(built, tmp_path / "reports")
    summary = (tmp_path / "reports/summary.md").read_text()
    assert "### results/lm/tiny: on-lumi, on-juwels side by side" in summary and "GPU-hours" in summary and "core-hours" in summary
    check_page(tmp_path / "reports", tmp_path)


def check_page(reported: Path, tmp_path: Path) -> None:
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
