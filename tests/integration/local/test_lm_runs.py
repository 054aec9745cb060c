"""Real runs of `python -m experiments.lm`, as the pipeline starts them (conftest.lm_runs): one
process, and two DDP processes of the same global batch."""

from __future__ import annotations

import json
import math

import pytest
from support import model_weights
from trained import LM_RUNS_GROUP, LM_STEPS, LmRun, shared_cores_environment

REQUIRED_METRICS = {
    "train_loss",
    "val_loss",
    "val_perplexity",
    "tokens_per_second",
    "tokens_per_second_per_device",
    "mean_step_time_s",
    "mfu",
    "mfu_peak_source",
    "peak_memory_bytes",
    "data_wait_share",
    "step_gap_share",
    "world_size",
    "num_nodes",
    "devices",
    "global_batch_size",
    "cluster_environment",
    "parameters",
    "data_fingerprint",
}

# The runs are shared with test_profiling_runs.py: "large" is one process of global batch 8, "ddp" two
# of the same global batch.
pytestmark = pytest.mark.xdist_group(LM_RUNS_GROUP)


def _metrics(run: LmRun) -> dict:
    return json.loads((run.ended_well() / "metrics.json").read_text())


@pytest.mark.slow
def test_single_process_run_writes_the_metrics(lm_runs):
    metrics = _metrics(lm_runs["large"])
    assert REQUIRED_METRICS <= metrics.keys()
    assert (metrics["world_size"], metrics["devices"], metrics["global_batch_size"], metrics["max_steps"]) == (1, 1, 8, LM_STEPS)
    assert all(math.isfinite(metrics[k]) and metrics[k] > 0 for k in ("train_loss", "val_loss", "tokens_per_second", "mean_step_time_s"))
    assert metrics["val_perplexity"] == pytest.approx(math.exp(metrics["val_loss"]))
    assert metrics["tokens_per_second_per_device"] == metrics["tokens_per_second"]
    assert metrics["tokens_per_second"] == pytest.approx(8 * 32 / metrics["mean_step_time_s"])
    assert 0 < metrics["data_wait_share"] <= metrics["step_gap_share"] < 1 and metrics["peak_memory_bytes"] > 50e6
    if metrics["mfu"] is None:  # a CPU without a known vector unit: said so, never guessed
        assert metrics["mfu_peak_source"].startswith("none: ")
    else:
        assert 0 < metrics["mfu"] < 1 and metrics["mfu_peak_source"].startswith("estimate: ")
    output = lm_runs["large"].output
    assert sorted(p.name for p in output.iterdir()) == ["dvclive", "metrics.json", "model", "profile"]  # profile: it was asked for
    assert (output / "dvclive" / "plots" / "metrics" / "train" / "loss.tsv").is_file()
    assert "rank 0/1 env=LightningEnvironment" in lm_runs["large"].process.stdout


@pytest.mark.slow
def test_two_ddp_processes_match_one_process_of_the_same_global_batch(lm_runs):
    import torch

    single, ddp = _metrics(lm_runs["large"]), _metrics(lm_runs["ddp"])
    assert (ddp["world_size"], ddp["batch_size"], ddp["global_batch_size"]) == (2, 4, 8)
    assert ddp["data_fingerprint"] == single["data_fingerprint"]
    assert ddp["mfu_peak_source"] == "ORCH_PEAK_TFLOPS=0.05 per device x 2 devices"
    assert ddp["mfu"] == pytest.approx(ddp["model_tflops_per_device"] / 0.05)
    one, two = model_weights(lm_runs["large"].output), model_weights(lm_runs["ddp"].output)
    # The same batches, averaged over two ranks instead of one: equal up to rounding.
    assert all(torch.allclose(one[name], two[name], atol=1e-4) for name in one)
    # Close, not equal: to give both ranks as many batches, the validation repeats a row when the count is odd.
    assert ddp["val_loss"] == pytest.approx(single["val_loss"], rel=1e-3)


def test_the_gpu_benchmark_checks_itself_on_cpu(tmp_path):
    """`benchmarks/gpu_mfu.py --smoke`: the pipeline's own command, compiled and not, read back."""
    import json
    import subprocess
    import sys

    from support import ROOT

    argv = [sys.executable, str(ROOT / "benchmarks/gpu_mfu.py"), "--smoke", "--val-rows", "32"]  # as LM_SHORT: speed is what counts here
    # Alone ~30 s (~50 s with an empty Inductor cache); at nice 5 beside a fresh machine's image build it took
    # over 600: the limit only stops a hang.
    done = subprocess.run(argv, env=shared_cores_environment(), capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((ROOT / "benchmarks/out/gpu_mfu_smoke.json").read_text())
    rows = [(r["compile"], r["optimizer"], r["device"], r["precision"]) for r in result["rows"]]
    assert rows == [("default", "AdamW fused", "cpu", "32-true"), ("off", "AdamW fused", "cpu", "32-true")]
    assert [r["timed_steps"] for r in result["rows"]] == [7, 8]  # the compiling step is not timed
    # The bound is worked out on CPU too, and not met: the tiny model is far below 350M parameters.
    assert result["bound_met"] is False and result["failures"] == []
    assert "peak TFLOP/s" in done.stdout  # every row names the peak its MFU divides by
