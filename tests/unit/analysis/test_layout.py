"""Parallel-layout planner (orchestrator/analysis/layout.py): published memory figures, the
collectives model, reasons, bad input. Its command, `orchestrator plan`: tests/unit/cli/test_plan_command.py."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

from orchestrator.analysis import layout as lay
from orchestrator.errors import PlanError

# Megatron-LM's GPT 13B (Narayanan et al. 2021 use this shape): 40 layers, hidden 5120, 40 heads.
GPT_13B = lay.ModelShape.from_architecture(layers=40, hidden=5120, heads=40, seq_len=2048, vocab=50257)
# Seed 002's machine, JUWELS Booster: 4 A100-40GB per node, 312 TFLOP/s bf16.
JUWELS_32 = lay.Hardware(gpus=32, gpus_per_node=4, memory_gb=40, peak_tflops=312)


# --- published figures -------------------------------------------------------------------------


@pytest.mark.parametrize(("stage", "published"), [(0, "120"), (1, "31.4"), (2, "16.6"), (3, "1.88")])
def test_zero_paper_figure_1(stage, published):
    """ZeRO (Rajbhandari et al. 2020), Figure 1: Psi = 7.5B, N_d = 64, K = 12,
    model states per GPU: baseline 120 GB, P_os 31.4, P_os+g 16.6, P_os+g+p 1.88 (1.875)."""
    assert lay.gb(lay.model_states(7.5e9, data=64, zero=stage).model_states) == published


def test_zero_paper_baseline_is_2_plus_2_plus_k_bytes():
    m = lay.model_states(7.5e9, data=64, zero=0)
    assert (m.parameters, m.gradients, m.optimizer) == (15.0, 15.0, 90.0)  # 2Psi + 2Psi + 12Psi


@pytest.mark.parametrize(("stage", "published"), [(0, "120"), (1, "31.4"), (2, "16.6"), (3, "1.88")])
def test_the_planner_gives_the_zero_papers_figures_for_pure_data_parallelism(stage, published):
    hw = lay.Hardware(gpus=64, gpus_per_node=8, memory_gb=1000)
    layouts = lay.plan_layouts(lay.ModelShape.from_parameters(7.5e9), hw)
    (pure_dp,) = [x for x in layouts if (x.data, x.tensor, x.pipeline, x.zero) == (64, 1, 1, stage)]
    assert lay.gb(pure_dp.memory.model_states) == published


def test_seed_002_13b_on_32_gpus_with_zero_1_needs_56_gb():
    """Seed 002 (OpenGPT-X, JUWELS Booster): "Parameters + gradients + optimizer states =
    56 GB (ZeRO Stage 1)" for 13B parameters on 32 GPUs, i.e. 2Psi + 2Psi + 12Psi/32.

    With Psi = 13e9 exactly this is 52 + 4.875 = 56.875 GB: the slide truncates to 56. With
    the real parameter count of a GPT 13B shape (12*L*h^2 + V*h = 12.84B) it is 56.18 GB,
    which rounds to 56 as well. Either way model states alone exceed the A100's 40 GB."""
    assert lay.model_states(13e9, data=32, zero=1).model_states == pytest.approx(56.875)
    assert int(lay.model_states(13e9, data=32, zero=1).model_states) == 56
    assert GPT_13B.parameters == 12_840_227_840
    assert round(lay.model_states(GPT_13B.parameters, data=32, zero=1).model_states) == 56


def test_seed_002_model_parallelism_of_4():
    """Seed 002: "MP = 4 reduces it to 14 GB per GPU". The slide's 14 is 56 / 4: it also
    divides the optimizer's share by 4, but ZeRO-1 had already spread that share over all
    32 GPUs (over 8 replicas x 4 model-parallel ranks it is still 12Psi/32 = 4.875 GB). So the
    same layout holds 13 + 4.875 = 17.9 GB. The slide's conclusion stands either way: it
    fits in 40 GB."""
    assert 56 / 4 == 14
    mp4 = lay.model_states(13e9, data=8, zero=1, model_parallel=4)
    assert mp4.parameters + mp4.gradients == pytest.approx(13.0)
    assert mp4.optimizer == pytest.approx(4.875)
    assert lay.gb(mp4.model_states) == "17.9"
    assert mp4.model_states < 40


def test_seed_002_layouts_on_juwels_booster():
    layouts = {(x.data, x.tensor, x.pipeline): x for x in lay.plan_layouts(GPT_13B, JUWELS_32, zero_stages=[1])}
    pure_dp = layouts[(32, 1, 1)]
    assert not pure_dp.feasible
    # The seed's 56 GB of model states (25.7 + 25.7 + 4.82 = 56.2), plus the activations.
    assert "40 GB available: parameters 25.7 + gradients 25.7 + optimizer 4.82 + activations 47.8" in pure_dp.reasons[-1]
    # MP = 4 with tensor parallelism inside a node fits; tensor degree 8 cannot stay inside one.
    assert layouts[(8, 4, 1)].feasible and layouts[(8, 4, 1)].comm.tensor_link == "node"
    assert layouts[(4, 8, 1)].reasons == ("tensor degree 8 exceeds 4 GPUs per node",)


# --- activations (Korthikanti et al. 2022) -----------------------------------------------------


def test_activations_follow_korthikanti_table_2():
    s, b, h, a, L = 2048, 1, 5120, 40, 40
    per_layer = s * b * h * (34 + 5 * a * s / h)
    assert lay.activations_gb(GPT_13B, b, tensor=1, pipeline=1, microbatches=1) == pytest.approx(per_layer * L / 1e9)
    assert lay.activations_gb(GPT_13B, b, tensor=8, pipeline=1, microbatches=1) == pytest.approx(per_layer * L / 8 / 1e9)
    assert lay.activations_gb(GPT_13B, b, 8, 1, 1, "selective") == pytest.approx(34 * s * b * h * L / 8 / 1e9)
    assert lay.activations_gb(GPT_13B, b, 8, 1, 1, "full") == pytest.approx(2 * s * b * h * L / 1e9)


def test_first_pipeline_stage_holds_l_layers_of_activations_whatever_p():
    """Eq. 5 of the paper: under 1F1B the first stage keeps p micro-batches of L/p layers."""
    one_stage = lay.activations_gb(GPT_13B, 1, tensor=4, pipeline=1, microbatches=64)
    assert lay.activations_gb(GPT_13B, 1, tensor=4, pipeline=8, microbatches=64) == pytest.approx(one_stage)
    # Fewer micro-batches than stages: only those are in flight.
    assert lay.activations_gb(GPT_13B, 1, tensor=4, pipeline=8, microbatches=2) == pytest.approx(one_stage * 2 / 8)


def test_parameter_count_formula():
    assert lay.ModelShape.from_architecture(2, 64, 4, vocab=100).parameters == 12 * 2 * 64**2 + 100 * 64
    assert lay.ModelShape.from_architecture(2, 64, 4, parameters=1e5).parameters == 1e5  # an exact count wins


def test_assumed_shape_is_gpt3_like():
    assumed = lay.ModelShape.from_parameters(13e9)
    assert (assumed.layers, assumed.hidden, assumed.heads, assumed.assumed) == (40, 5120, 40, True)  # GPT-3 13B's shape, nearly
    assert assumed.parameters == 13e9


# --- communication -----------------------------------------------------------------------------


def test_ring_allreduce():
    assert lay.ring_allreduce_s(1e9, 2, 1.0) == pytest.approx(1.0)  # 2(n-1)/n = 1
    assert lay.ring_allreduce_s(1e9, 8, 1.0) == pytest.approx(1.75)
    assert lay.ring_allreduce_s(1e9, 1, 1.0) == 0.0


def comm(zero, microbatches=1, data=8, tensor=1, pipeline=1, hw=None):
    hw = hw or lay.Hardware(gpus=data * tensor * pipeline, gpus_per_node=8, memory_gb=80)
    return lay.communication(GPT_13B, hw, data, tensor, pipeline, zero, 1, microbatches, 64)


def test_zero_communication_volumes():
    """ZeRO paper section 7: stages 1 and 2 move what DP moves (2Psi), stage 3 1.5 times that (3Psi)."""
    base = comm(0).data_s
    assert base == pytest.approx(lay.ring_allreduce_s(2 * GPT_13B.parameters, 8, 300))
    assert comm(1).data_s == pytest.approx(base)
    assert comm(2).data_s == pytest.approx(base)
    assert comm(3).data_s == pytest.approx(1.5 * base)
    # With gradient accumulation, ZeRO-2 reduce-scatters every micro-batch and ZeRO-3 also gathers.
    assert comm(1, microbatches=8).data_s == pytest.approx(base)
    assert comm(2, microbatches=8).data_s == pytest.approx(base * 9 / 2)
    assert comm(3, microbatches=8).data_s == pytest.approx(base * 12)


def test_tensor_and_pipeline_traffic_and_links():
    hw = lay.Hardware(gpus=32, gpus_per_node=8, memory_gb=80, intra_node_gbps=300, inter_node_gbps=25)
    c = comm(1, microbatches=4, data=2, tensor=4, pipeline=4, hw=hw)
    activation = 2 * 2048 * 5120
    assert c.tensor_link == "node" and c.data_link == "node" and c.pipeline_link == "network"  # spans 4, 8 and 32 GPUs
    assert c.tensor_s == pytest.approx(40 / 4 * 4 * 4 * lay.ring_allreduce_s(activation, 4, 300))
    assert c.pipeline_s == pytest.approx(2 * 4 * activation / 4 / 25e9)
    assert c.bubble == pytest.approx(3 / 4)
    wide = comm(1, microbatches=4, data=4, tensor=4, pipeline=2, hw=hw)
    assert wide.data_link == "network"  # a data group spans t*d = 16 GPUs, two nodes


def test_bubble_is_priced_with_the_peak():
    c = lay.communication(GPT_13B, JUWELS_32, 4, 1, 8, 1, 1, 128, 512)
    compute_s = 6 * GPT_13B.parameters * 512 * 2048 / (32 * 312e12)
    assert c.bubble_s == pytest.approx(7 / 128 * compute_s)
    assert lay.communication(GPT_13B, lay.Hardware(32, 4, 40), 4, 1, 8, 1, 1, 128, 512).bubble_s is None


# --- the plan: ranking and reasons -------------------------------------------------------------


def test_every_decomposition_is_listed_once_feasible_first_and_ranked():
    layouts = lay.plan_layouts(GPT_13B, JUWELS_32)
    pairs = sum(1 for t in range(1, 33) if 32 % t == 0 for p in range(1, 33 // t + 1) if (32 // t) % p == 0)
    assert len(layouts) == pairs * 4
    assert all(x.data * x.tensor * x.pipeline == 32 for x in layouts)
    assert len({(x.data, x.tensor, x.pipeline, x.zero) for x in layouts}) == len(layouts)
    feasible = [x for x in layouts if x.feasible]
    assert layouts[: len(feasible)] == feasible
    assert [x.cost_s for x in feasible] == sorted(x.cost_s for x in feasible)
    assert all(x.memory.total <= 40 for x in feasible)
    assert all(x.reasons for x in layouts[len(feasible) :])


def test_equal_communication_ranks_the_smaller_memory_first():
    layouts = [x for x in lay.plan_layouts(GPT_13B, JUWELS_32, zero_stages=[0, 1]) if x.feasible]
    for a, b in itertools.pairwise(layouts):
        if a.cost_s == b.cost_s and a.comm.bubble == b.comm.bubble:
            assert a.memory.total <= b.memory.total


def test_rejected_layouts_say_why():
    model = lay.ModelShape.from_architecture(layers=36, hidden=768, heads=12)
    hw = lay.Hardware(gpus=48, gpus_per_node=8, memory_gb=80)
    layouts = lay.plan_layouts(model, hw, global_batch=512)
    assert layouts[0].feasible
    reasons = {r for x in layouts for r in x.reasons}
    assert "tensor degree 16 exceeds 8 GPUs per node" in reasons
    assert "tensor degree 3 does not divide the 8 GPUs of a node: its groups would straddle nodes" in reasons
    assert "tensor degree 8 does not divide the 12 attention heads" in reasons
    assert "pipeline degree 8 does not divide the 36 layers" in reasons
    assert "global batch 512 is not a multiple of micro-batch 1 x data degree 3 = 3" in reasons
    assert "ZeRO shards over data-parallel replicas: with data degree 1, stage 2 is stage 0" in reasons


def test_an_assumed_shape_still_bounds_t_and_p():
    model = lay.ModelShape.from_parameters(350e6)  # ~12 layers and 12 heads
    reasons = {r for x in lay.plan_layouts(model, lay.Hardware(gpus=32, gpus_per_node=16, memory_gb=80)) for r in x.reasons}
    assert "tensor degree 16 exceeds the ~12 attention heads assumed for 350M parameters" in reasons
    assert "pipeline degree 16 exceeds the ~12 layers assumed for 350M parameters" in reasons
    assert not any("does not divide the 12" in r for r in reasons)  # divisibility needs the real shape


def test_memory_reason_has_the_breakdown():
    (pure_dp,) = [x for x in lay.plan_layouts(GPT_13B, JUWELS_32, zero_stages=[0]) if (x.data, x.tensor, x.pipeline) == (32, 1, 1)]
    assert pure_dp.reasons == (
        "needs 253 GB per GPU, 40 GB available: parameters 25.7 + gradients 25.7 + optimizer 154 + activations 47.8",
    )


def test_a_zero_filter_is_respected():
    assert {x.zero for x in lay.plan_layouts(GPT_13B, JUWELS_32, zero_stages=[3])} == {3}


# --- impossible input --------------------------------------------------------------------------


def test_gpus_must_fill_whole_nodes():
    with pytest.raises(PlanError) as err:
        lay.Hardware(gpus=30, gpus_per_node=4, memory_gb=40)
    assert "30 GPUs do not fill whole nodes of 4" in err.value.render()
    assert "use 28 or 32 GPUs" in err.value.render()
    assert lay.Hardware(gpus=3, gpus_per_node=4, memory_gb=40).node_size == 3  # part of one node is fine


def test_a_model_that_fits_nowhere_is_explained():
    with pytest.raises(PlanError) as err:
        lay.plan_layouts(lay.ModelShape.from_parameters(70e9), lay.Hardware(gpus=8, gpus_per_node=8, memory_gb=40), zero_stages=[0, 1])
    text = err.value.render()
    assert text.startswith("70B parameters do not fit on 8 GPUs of 40 GB in any layout")
    assert "the least memory any layout needs is 159 GB per GPU (d=1 t=8 p=1 ZeRO-0)" in text
    assert "16 bytes per parameter, 140 GB per GPU even when sharded over all 8 GPUs" in text
    assert "at least 28 GPUs of 40 GB" in text
    assert "only ZeRO stage(s) 0, 1 were considered" in text


def test_no_runnable_decomposition_lists_the_blockers():
    model = lay.ModelShape.from_architecture(layers=40, hidden=5120, heads=40)
    with pytest.raises(PlanError) as err:
        lay.plan_layouts(model, lay.Hardware(gpus=6, gpus_per_node=6, memory_gb=80), global_batch=7)
    problems = err.value.problems
    assert err.value.headline == "no layout of 12.8B parameters can run on 6 GPUs of 80 GB"
    assert "tensor degree 3 does not divide the 40 attention heads" in problems
    assert "pipeline degree 6 does not divide the 40 layers" in problems
    assert not any("stage 1 is stage 0" in p for p in problems)  # its stage-0 twin carries the real blockers


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: lay.ModelShape.from_architecture(2, 5000, 48), "hidden size 5000 is not a multiple of the 48 attention heads"),
        (lambda: lay.ModelShape.from_parameters(0), "parameters must be more than 0"),
        (lambda: lay.Hardware(0, 4, 40), "GPU count must be at least 1"),
        (lambda: lay.plan_layouts(GPT_13B, JUWELS_32, micro_batch=0), "micro-batch must be at least 1"),
        (lambda: lay.plan_layouts(GPT_13B, JUWELS_32, zero_stages=[4]), "ZeRO stage 4 does not exist"),
    ],
)
def test_bad_values_raise_with_a_message(make, message):
    with pytest.raises(PlanError) as err:
        make()
    assert message in err.value.render()


@settings(max_examples=examples(60), deadline=None)
@given(
    parameters=st.sampled_from([125e6, 1.3e9, 7e9, 13e9, 70e9, 175e9]),
    nodes=st.sampled_from([1, 2, 3, 4, 8, 16]),
    gpus_per_node=st.sampled_from([4, 8]),
    memory_gb=st.sampled_from([16, 40, 64, 80]),
)
def test_never_an_empty_list(parameters, nodes, gpus_per_node, memory_gb):
    hw = lay.Hardware(nodes * gpus_per_node, gpus_per_node, memory_gb)
    try:
        layouts = lay.plan_layouts(lay.ModelShape.from_parameters(parameters), hw, global_batch=768)
    except PlanError as exc:
        assert exc.problems  # an explanation, not silence
    else:
        assert layouts[0].feasible
