"""The shipped pipeline on the `local` profile, as a user runs it: `dvc repro` trains both experiments
(every matrix item, one and two CPU processes) and writes the report; DVC's own commands then read the
metrics, the curves and the experiment table. Issue 5's first acceptance point.

The one change to the shipped files is the one a user makes for a quick first run: params.yaml's
`max_steps` lowered (STEPS) before the commit. The LM's steps were most of the pipeline's CPU, and
nothing here depends on how many there are, only that every one is logged. (`dvc repro` runs with
OMP_WAIT_POLICY=passive, as every test process does: conftest.py; the 1x1 items' two OpenMP threads
then wait for each other asleep instead of spinning, which on a loaded 2-core machine costs several
times the step's CPU.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from support import ROOT, require, require_training

# Both experiments' items: what params.yaml's matrix expands to.
BENCHMARK = [f"results/benchmark/pydoc-topics/tiny/{layout}" for layout in ("1x1", "1x2")]
LM = [f"results/lm/tiny/k{k}/{layout}" for k in (0, 4) for layout in ("1x1", "1x2")]
# Both experiments' max_steps in the project's params.yaml (30 as shipped).
STEPS = 8
# The LM's corpus, prepared by the pipeline: the tokeniser and params' two shards.
TOKENS = ["data/lm/tokens/tokenizer", "data/lm/tokens/shard-0", "data/lm/tokens/shard-1"]


def run(project: Path, *argv: str, timeout: float = 120) -> str:
    done = subprocess.run(argv, cwd=project, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def repro(tmp_path_factory) -> Path:
    """A Git + DVC project with the shipped dvc.yaml, params.yaml and experiments/, after `dvc repro`."""
    require_training()
    require("git")
    project = tmp_path_factory.mktemp("pipeline") / "project"
    project.mkdir()
    shutil.copy(ROOT / "dvc.yaml", project / "dvc.yaml")
    shipped = (ROOT / "params.yaml").read_text()
    assert shipped.count("\n  max_steps: 30\n") == 2, "the shipped benchmark's and LM's max_steps are no longer 30"
    (project / "params.yaml").write_text(shipped.replace("\n  max_steps: 30\n", f"\n  max_steps: {STEPS}\n"))
    (project / "containers").mkdir()
    shutil.copy(ROOT / "containers/none.digest", project / "containers/none.digest")
    shutil.copytree(ROOT / "experiments", project / "experiments", ignore=shutil.ignore_patterns("__pycache__"))
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert params["orchestrator"]["cluster"] == "local" and params["lm"]["max_steps"] == params["benchmark"]["max_steps"] == STEPS
    for argv in (["git", "init", "-q"], ["dvc", "init", "-q"], ["git", "add", "-A"]):
        run(project, *argv)
    run(project, "git", "-c", "user.name=test", "-c", "user.email=test@example.org", "commit", "-qm", "the shipped pipeline")
    started = time.monotonic()
    # Alone on 2 cores ~2 minutes; at nice 5 beside the whole suite's testbed groups it has taken 14.
    run(project, "dvc", "repro", timeout=1800)
    print(f"\ndvc repro of the shipped pipeline: {time.monotonic() - started:.0f} s")
    return project


@pytest.mark.slow
def test_dvc_metrics_show_lists_loss_throughput_mfu_and_data_wait_for_every_item(repro):
    shown = json.loads(run(repro, "dvc", "metrics", "show", "--json"))[""]["data"]
    for folder in BENCHMARK + LM:
        metrics = shown[f"{folder}/metrics.json"]["data"]
        throughput = "samples_per_second" if folder in BENCHMARK else "tokens_per_second"
        assert metrics["train_loss"] > 0 and metrics["val_loss"] > 0 and metrics[throughput] > 0, folder
        assert 0 < metrics["mfu"] < 1 and metrics["mfu_peak_source"].startswith("estimate: "), folder
        assert 0 <= metrics["data_wait_share"] < 0.5, folder
        assert metrics["world_size"] == int(folder[-1]), folder
    assert "reports/report.json" in shown


@pytest.mark.slow
def test_dvc_plots_show_has_every_items_loss_curve(repro):
    plots = json.loads(run(repro, "dvc", "plots", "show", "--json"))["data"]
    for folder in BENCHMARK + LM:
        (rendered,) = plots[f"{folder}/dvclive/plots/metrics/train/loss.tsv"]
        points = rendered["content"]["data"]["values"]
        assert [int(p["step"]) for p in points] == list(range(1, STEPS + 1)), folder  # params: max_steps, a point a step
        assert all(float(p["loss"]) > 0 for p in points), folder
    # And the HTML a user opens: one file, every curve in it.
    run(repro, "dvc", "plots", "show", "-o", "plots-html")
    page = (repro / "plots-html" / "index.html").read_text()
    assert all(f"{folder}/dvclive/plots/metrics/train/loss.tsv" in page for folder in BENCHMARK + LM)


@pytest.mark.slow
def test_dvc_exp_show_has_the_matrix_params_and_metrics(repro):
    (workspace, *_) = json.loads(run(repro, "dvc", "exp", "show", "--json"))
    assert workspace["rev"] == "workspace"
    metrics = workspace["data"]["metrics"]
    assert {f"{folder}/metrics.json" for folder in BENCHMARK + LM} <= metrics.keys()
    params = workspace["data"]["params"]["params.yaml"]["data"]
    assert params["lm"]["goldfish_ks"] == [0, 4] and params["orchestrator"]["cluster"] == "local"


@pytest.mark.slow
def test_a_second_repro_runs_nothing(repro):
    ledger = sorted((repro / ".orchestrator/ledger").glob("*.json"))
    before = {path.name: path.read_text() for path in ledger}
    out = run(repro, "dvc", "repro")
    assert "Data and pipelines are up to date." in out and "Running stage" not in out
    assert {path.name: path.read_text() for path in sorted((repro / ".orchestrator/ledger").glob("*.json"))} == before
    assert len(before) == len(BENCHMARK) + len(LM) + 3  # and the corpus's tokeniser and two shards
    assert "Data and pipelines are up to date." in run(repro, "dvc", "status")


def test_the_lm_trains_on_the_corpus_the_pipeline_prepared_and_only_its_changes_restale_it(repro):
    assert all((repro / folder).is_dir() for folder in TOKENS)
    assert len(list((repro / "data/lm/tokens").rglob("shard-*-of-00002.json"))) == 2
    runs = [json.loads((repro / folder / "metrics.json").read_text()) for folder in LM]
    assert {m["data"] for m in runs} == {"data/lm/tokens"} and len({m["data_fingerprint"] for m in runs}) == 1
    params = repro / "params.yaml"
    shipped = params.read_text()
    try:
        for change, stale in (
            (("seq_len: 128", "seq_len: 64"), {"lm"}),  # the training's: the tokens stay
            (("vocab_size: 512", "vocab_size: 600"), {"lm-tokenizer", "lm"}),  # DVC lists the shards once the tokeniser changed
        ):
            params.write_text(shipped.replace(*change, 1))
            listed = json.loads(run(repro, "dvc", "status", "--json"))
            assert {name.split("@")[0] for name in listed} - {"report"} == stale, listed
    finally:
        params.write_text(shipped)
