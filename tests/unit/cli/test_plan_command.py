"""`orchestrator layout` (orchestrator/cli/layout.py): the layout table, JSON and Markdown, options
over the profile, bad input, parameter counts; the planner stays off torch."""

import json
import subprocess
import sys

import pytest
from support import invoke

from orchestrator.analysis import layout as lay
from orchestrator.cli.layout import Count

# Megatron-LM's GPT 13B (Narayanan et al. 2021 use this shape): 40 layers, hidden 5120, 40 heads.
GPT_13B = lay.ModelShape.from_architecture(layers=40, hidden=5120, heads=40, seq_len=2048, vocab=50257)

SEED_002 = ["--layers", "40", "--hidden", "5120", "--heads", "40", "--gpus", "32", "--cluster", "juwels-booster"]


def test_cli_table():
    result = invoke("layout", *SEED_002, "--zero", "1", "--top", "3")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "12.8B parameters (40 layers, hidden 5120, 40 heads, sequence 2048, vocabulary 50257)" in out
    assert "32 GPUs on 8 nodes of 4, 40 GB each; peak 312 TFLOP/s (from profile juwels-booster)" in out
    assert "300 GB/s per GPU in a node, 25 GB/s per GPU between nodes" in out  # from the profile
    assert "Feasible layouts, best first (3 of 5 shown)" in out
    assert "Why #1: d=" in out
    assert (
        "d=32 t=1 p=1 ZeRO-1: needs 104 GB per GPU, 40 GB available: parameters 25.7 + gradients 25.7 + optimizer 4.82 + activations 47.8"
        in out
    )
    assert "d=4 t=8 p=1 ZeRO-1: tensor degree 8 exceeds 4 GPUs per node" in out
    assert "default bandwidths used" not in out
    assert "(default)" in invoke("layout", "--parameters", "1B", "--gpus", "8", "--gpus-per-node", "4", "--gpu-memory-gb", "40").output


def test_cli_json():
    result = invoke("layout", *SEED_002, "--format", "json", "--top", "2")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["model"]["parameters"] == GPT_13B.parameters
    assert doc["hardware"]["gpus_per_node"] == 4 and doc["hardware"]["sources"]["memory_gb"] == "profile juwels-booster"
    assert [x["rank"] for x in doc["feasible"]] == [1, 2] and doc["feasible_count"] >= 2
    assert all(not x["reasons"] for x in doc["feasible"])
    assert doc["rejected"] and all(x["reasons"] for x in doc["rejected"])
    best = doc["feasible"][0]
    assert best["memory_gb"]["total"] <= 40 and set(best["comm_s"]) == {"data", "tensor", "pipeline", "total"}


def test_cli_markdown():
    result = invoke(
        "layout", "--parameters", "7.5B", "--gpus", "64", "--gpus-per-node", "8", "--gpu-memory-gb", "80", "--format", "markdown"
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = lines.index(
        "| # | d | t | p | ZeRO | params | grads | optim | activ | total GB | free GB | DP s | TP s | PP s | bubble | comm+bubble s |"
    )
    assert lines[header + 1] == "|" + "---|" * 16 and lines[header + 2].startswith("| 1 | ")
    assert any(line.startswith("**Rejected**") for line in lines)
    assert any("shape is assumed from the parameter count" in line for line in lines)


def test_cli_options_override_the_profile():
    result = invoke(
        "layout",
        "--parameters",
        "13B",
        "--gpus",
        "16",
        "--cluster",
        "lumi",
        "--gpu-memory-gb",
        "32",
        "--inter-node-gbps",
        "12.5",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    hw = json.loads(result.output)["hardware"]
    assert (hw["gpus_per_node"], hw["memory_gb"], hw["inter_node_gbps"], hw["peak_tflops"]) == (8, 32, 12.5, 191.5)
    assert hw["sources"] == {
        "gpus_per_node": "profile lumi",
        "memory_gb": "option",
        "inter_node_gbps": "option",
        "peak_tflops": "profile lumi",
        "intra_node_gbps": "profile lumi",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--parameters", "abc", "--gpus", "8", "--cluster", "lumi"], "'abc' is not a parameter count (examples: 13B, 7.5e9, 350M)"),
        (["--parameters", "1e308", "--gpus", "8", "--cluster", "lumi"], "'1e308': more than any model this can place"),  # overflowed
        (["--parameters", "1e400", "--gpus", "8", "--cluster", "lumi"], "'1e400': more than any model this can place"),  # inf
        (
            ["--parameters", "70B", "--gpus", "8", "--gpus-per-node", "8", "--gpu-memory-gb", "40"],
            "error: 70B parameters do not fit on 8 GPUs of 40 GB in any layout",
        ),
        (["--parameters", "13B", "--gpus", "30", "--cluster", "juwels-booster"], "30 GPUs do not fill whole nodes of 4"),
        (["--parameters", "13B", "--gpus", "8"], "missing --gpus-per-node and --gpu-memory-gb"),
        (["--layers", "40", "--gpus", "8", "--cluster", "lumi"], "--layers, --hidden and --heads go together (missing: --hidden, --heads)"),
        (["--gpus", "8", "--cluster", "lumi"], "give the model: --parameters"),
        (["--parameters", "1B", "--gpus", "8", "--cluster", "local"], "cluster local has no GPUs in its profile"),
        (["--parameters", "1B", "--gpus", "8", "--cluster", "lumi-c"], "unknown cluster 'lumi-c'"),
        (["--parameters", "1B", "--gpus", "0", "--cluster", "lumi"], "Invalid value for '--gpus'"),
        # nan passes every comparison and inf has no maximum to fail: either would price the layout (issue 33).
        (["--parameters", "1B", "--gpus", "8", "--cluster", "lumi", "--peak-tflops", "nan"], "'nan' is not a finite number"),
        (["--parameters", "1B", "--gpus", "8", "--cluster", "lumi", "--inter-node-gbps", "inf"], "'inf' is not a finite number"),
        (["--parameters", "1B", "--gpus", "8", "--gpus-per-node", "8", "--gpu-memory-gb", "nan"], "'nan' is not a finite number"),
    ],
)
def test_cli_bad_input_exits_non_zero_without_a_traceback(args, message):
    result = invoke("layout", *args)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)  # handled, not crashed


@pytest.mark.parametrize(
    ("text", "count"),
    [("13B", 13e9), ("7.5e9", 7.5e9), ("350M", 350e6), ("1.2T", 1.2e12), (" 70 b ", 70e9), ("125000000", 125e6), ("2.5K", 2500)],
)
def test_parameter_counts(text, count):
    assert Count().convert(text, None, None) == pytest.approx(count)


def test_importing_the_planner_does_not_import_torch():
    code = (
        "import sys, orchestrator.analysis.layout, orchestrator.cli.layout; "
        "print(sorted(m for m in ('torch', 'lightning', 'pytorch_lightning', 'rich') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
