"""The shipped pipeline on the `local` profile, as a user runs it: `dvc repro` trains both experiments
(every matrix item, one and two CPU processes) and writes the report (conftest.shipped_pipeline); DVC's
own commands then read the metrics, the curves and the experiment table. Issue 5's first acceptance point.

(`dvc repro` runs with OMP_WAIT_POLICY=passive, as every test process does: conftest.py; the 1x1 items'
two OpenMP threads then wait for each other asleep instead of spinning, which on a loaded 2-core machine
costs several times the step's CPU.)"""

from __future__ import annotations

import json

import pytest
from support import run_in as run
from trained import SHIPPED_BENCHMARK as BENCHMARK
from trained import SHIPPED_GROUP
from trained import SHIPPED_LM as LM
from trained import SHIPPED_STEPS as STEPS

pytestmark = pytest.mark.xdist_group(SHIPPED_GROUP)

# The LM's corpus, prepared by the pipeline: the tokeniser and params' two shards.
TOKENS = ["data/lm/tokens/tokenizer", "data/lm/tokens/shard-0", "data/lm/tokens/shard-1"]


@pytest.mark.slow
def test_dvc_metrics_show_lists_loss_throughput_mfu_and_data_wait_for_every_item(shipped_pipeline):
    shown = json.loads(run(shipped_pipeline, "dvc", "metrics", "show", "--json"))[""]["data"]
    for folder in BENCHMARK + LM:
        metrics = shown[f"{folder}/metrics.json"]["data"]
        throughput = "samples_per_second" if folder in BENCHMARK else "tokens_per_second"
        assert metrics["train_loss"] > 0 and metrics["val_loss"] > 0 and metrics[throughput] > 0, folder
        assert 0 < metrics["mfu"] < 1 and metrics["mfu_peak_source"].startswith("estimate: "), folder
        assert 0 <= metrics["data_wait_share"] < 0.5, folder
        assert metrics["world_size"] == int(folder[-1]), folder
    assert "reports/report.json" in shown


@pytest.mark.slow
def test_dvc_plots_show_has_every_items_loss_curve(shipped_pipeline):
    plots = json.loads(run(shipped_pipeline, "dvc", "plots", "show", "--json"))["data"]
    for folder in BENCHMARK + LM:
        (rendered,) = plots[f"{folder}/dvclive/plots/metrics/train/loss.tsv"]
        points = rendered["content"]["data"]["values"]
        assert [int(p["step"]) for p in points] == list(range(1, STEPS + 1)), folder  # params: max_steps, a point a step
        assert all(float(p["loss"]) > 0 for p in points), folder
    # And the HTML a user opens: one file, every curve in it.
    run(shipped_pipeline, "dvc", "plots", "show", "-o", "plots-html")
    page = (shipped_pipeline / "plots-html" / "index.html").read_text()
    assert all(f"{folder}/dvclive/plots/metrics/train/loss.tsv" in page for folder in BENCHMARK + LM)


@pytest.mark.slow
def test_dvc_exp_show_has_the_matrix_params_and_metrics(shipped_pipeline):
    (workspace, *_) = json.loads(run(shipped_pipeline, "dvc", "exp", "show", "--json"))
    assert workspace["rev"] == "workspace"
    metrics = workspace["data"]["metrics"]
    assert {f"{folder}/metrics.json" for folder in BENCHMARK + LM} <= metrics.keys()
    params = workspace["data"]["params"]["params.yaml"]["data"]
    assert params["lm"]["goldfish_ks"] == [0, 4] and params["orchestrator"]["cluster"] == "local"


@pytest.mark.slow
def test_a_second_repro_runs_nothing(shipped_pipeline):
    ledger = sorted((shipped_pipeline / ".orchestrator/ledger").glob("*.json"))
    before = {path.name: path.read_text() for path in ledger}
    out = run(shipped_pipeline, "dvc", "repro")
    assert "Data and pipelines are up to date." in out and "Running stage" not in out
    assert {path.name: path.read_text() for path in sorted((shipped_pipeline / ".orchestrator/ledger").glob("*.json"))} == before
    assert len(before) == len(BENCHMARK) + len(LM) + 3  # and the corpus's tokeniser and two shards
    assert "Data and pipelines are up to date." in run(shipped_pipeline, "dvc", "status")


def test_the_lm_trains_on_the_corpus_the_pipeline_prepared_and_only_its_changes_restale_it(shipped_pipeline):
    assert all((shipped_pipeline / folder).is_dir() for folder in TOKENS)
    assert len(list((shipped_pipeline / "data/lm/tokens").rglob("shard-*-of-00002.json"))) == 2
    runs = [json.loads((shipped_pipeline / folder / "metrics.json").read_text()) for folder in LM]
    assert {m["data"] for m in runs} == {"data/lm/tokens"} and len({m["data_fingerprint"] for m in runs}) == 1
    params = shipped_pipeline / "params.yaml"
    shipped = params.read_text()
    try:
        for change, stale in (
            (("seq_len: 128", "seq_len: 64"), {"lm"}),  # the training's: the tokens stay
            (("vocab_size: 512", "vocab_size: 600"), {"lm-tokenizer", "lm"}),  # DVC lists the shards once the tokeniser changed
        ):
            params.write_text(shipped.replace(*change, 1))
            listed = json.loads(run(shipped_pipeline, "dvc", "status", "--json"))
            assert {name.split("@")[0] for name in listed} - {"report"} == stale, listed
    finally:
        params.write_text(shipped)
