"""What one parallel layout of a transformer costs: memory per GPU and communication per step.

Pure arithmetic (no I/O, no clock, no torch). The search over layouts and their ranking:
:mod:`~orchestrator.analysis.layout`.

Units: GB = 1e9 bytes (as in the ZeRO paper); bandwidths in GB/s, one direction, per GPU.
Notation: Psi parameters, L layers, h hidden size, a attention heads, s sequence length,
V vocabulary, b micro-batch and B global batch (sequences), d/t/p data/tensor/pipeline
degree, N = d*t*p GPUs, m = B/(b*d) micro-batches per replica and step.

Parameters (Narayanan et al. 2021, "Efficient large-scale language model training on
GPU clusters using Megatron-LM", SC21, section 5.1): Psi ~ 12*L*h^2 + V*h, that is 4h^2
of attention and 8h^2 of MLP weights per layer plus the embedding. Biases, layer norms and position
embeddings (<1 %) are left out. Given only Psi, a GPT-3-like shape is assumed for the
activation and traffic estimates (Brown et al. 2020, Table 2.1: heads of 128, h ~ 128*L):
L = round((Psi / (12*128^2))^(1/3)), h = 128*L, a = L. Then t and p are only kept within
those heads and layers, not required to divide them.

Model states (Rajbhandari et al. 2020, "ZeRO: memory optimizations toward training
trillion parameter models", SC20, section 3.1 and Figure 1): mixed-precision Adam keeps
2 bytes of 16-bit weights, 2 of gradients and K = 12 of optimizer state (fp32 weights,
momentum, variance) per parameter. Tensor and pipeline parallelism split them t*p ways
(Psi' = Psi/(t*p); the embedding is counted as if spread like the layers). ZeRO shards them
over the d data-parallel replicas:

    stage 0  2Psi' + 2Psi' + K*Psi'
    stage 1  2Psi' + 2Psi' + K*Psi'/d     (P_os)
    stage 2  2Psi' + (2 + K)*Psi'/d       (P_os+g)
    stage 3  (2 + 2 + K)*Psi'/d           (P_os+g+p; FSDP's full sharding)

7.5B parameters with d = 64 come to 120, 31.4, 16.6 and 1.88 GB per GPU, the paper's Figure 1.

Activations (Korthikanti et al. 2022, "Reducing activation recomputation in large
transformer models", MLSys23, Table 2 and Eq. 5), in 16-bit, per layer and micro-batch.
Tensor parallelism is assumed to come with sequence parallelism (Megatron-LM's
--sequence-parallel), which also splits the layer norms and dropouts t ways:

    recompute none       s*b*h*(34 + 5*a*s/h) / t
    recompute selective  s*b*h*34 / t           (attention scores and softmax recomputed)
    recompute full       s*b*h*2                (only each layer's input kept)

Under the 1F1B pipeline schedule the first stage holds its L/p layers for min(m, p)
micro-batches in flight. Once m >= p that is p*L/p = L layers whatever p is (the paper's
Eq. 5), so activations shrink with t but not with p. The embedding and loss-layer terms
(a few per cent) are left out.

Communication per step. Nothing is assumed to overlap with compute, so these times are an
upper bound. Collectives are rings (Patarasuk & Yuan 2009; NCCL's "bus bandwidth"): an
all-reduce of X bytes over n GPUs takes 2(n-1)/n * X/bw, and a reduce-scatter or an
all-gather takes half that. bw is the per-GPU bandwidth of the slowest link in the ring.

- data parallel, over the 2Psi' bytes of 16-bit gradients:
    stage 0, 1  one all-reduce per step: 2(d-1)/d * 2Psi'/bw
    stage 2     a reduce-scatter per micro-batch (the gradients are not kept whole, so
                DeepSpeed reduces them in every backward pass) and one all-gather of the
                updated weights: (m+1)(d-1)/d * 2Psi'/bw
    stage 3     per micro-batch, all-gathers of the weights in the forward and in the
                backward pass and a reduce-scatter of the gradients: 3m(d-1)/d * 2Psi'/bw
  With m = 1 these are the ZeRO paper's volumes, 2Psi and 3Psi (section 7).
- tensor parallel: per layer and micro-batch, 4 all-reduces of the 2*s*b*h-byte
  activations, 2 in the forward and 2 in the backward pass (Shoeybi et al. 2019,
  Megatron-LM, Figure 4). Full recomputation repeats the forward, which makes 6. The
  total is (L/p)*m*4 * 2(t-1)/t * 2sbh/bw. Sequence parallelism swaps each all-reduce for an
  all-gather and a reduce-scatter of the same volume.
- pipeline: each stage sends every micro-batch's activations forward and its gradients
  back, 2m * 2sbh/(t*bw) (the scatter-gather optimisation sends 1/t of the tensor).
- bubble: the stages sit idle for a fraction (p-1)/m of the compute time (Narayanan et
  al. 2021, section 2.2). The compute time is 6*Psi*T FLOPs (8*Psi*T with full
  recomputation; T = B*s tokens) at the GPUs' peak, so the bubble's time is a lower
  bound. It is known only when the peak FLOP/s is.

Where a group runs: ranks are numbered with tensor innermost, then data, then pipeline
(Megatron-LM's order). So a tensor group spans t consecutive GPUs, a data group t*d and a
pipeline group all N. A group whose span fits in one node uses the intra-node bandwidth;
otherwise its ring crosses the network and gets the per-GPU share of the node's injection
bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from orchestrator.errors import PlanError

GB = 1e9
WEIGHT_BYTES = 2  # 16-bit weights
GRADIENT_BYTES = 2  # 16-bit gradients
ADAM_K = 12  # fp32 weights + momentum + variance: ZeRO's K for mixed-precision Adam
ACTIVATION_BYTES = 2  # 16-bit activations (Korthikanti et al.'s 34 assumes them)
ZERO_STAGES = (0, 1, 2, 3)
Recompute = Literal["none", "selective", "full"]
RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")
DEFAULT_SEQ_LEN = 2048
DEFAULT_VOCAB = 50257  # GPT-2's BPE vocabulary
# Sequences per step: GPT-3 13B's batch, 1M tokens of 2048 (Brown et al. 2020, Table 2.1).
DEFAULT_GLOBAL_BATCH = 512
# When neither the profile nor the user says: an A100 node with one 200 Gb/s NIC per GPU
# (NVLink3: 12 links of 25 GB/s each way; HDR200 InfiniBand or Slingshot-11: 25 GB/s).
DEFAULT_INTRA_NODE_GBPS = 300.0
DEFAULT_INTER_NODE_GBPS = 25.0
_HEAD = 128  # the assumed shape's head size, and its hidden size per layer

Link = Literal["node", "network"]


@dataclass(frozen=True)
class ModelShape:
    """A dense GPT-style transformer. Build it with :meth:`from_architecture` or :meth:`from_parameters`."""

    parameters: float
    layers: int
    hidden: int
    heads: int
    seq_len: int = DEFAULT_SEQ_LEN
    vocab: int = DEFAULT_VOCAB
    assumed: bool = False  # shape guessed from the parameter count: it feeds estimates, not checks

    def __post_init__(self) -> None:
        problems = [f"{what} must be at least 1, not {value}" for what, value in self._counts() if value < 1]
        if self.vocab < 0:
            problems.append(f"vocabulary must be 0 or more, not {self.vocab}")
        if not problems and self.hidden % self.heads:
            problems.append(f"hidden size {self.hidden} is not a multiple of the {self.heads} attention heads")
        if problems:
            raise PlanError("impossible model shape", problems)

    def _counts(self) -> list[tuple[str, float]]:
        return [
            ("parameters", self.parameters),
            ("layers", self.layers),
            ("hidden size", self.hidden),
            ("heads", self.heads),
            ("sequence length", self.seq_len),
        ]

    @classmethod
    def from_architecture(
        cls,
        layers: int,
        hidden: int,
        heads: int,
        seq_len: int = DEFAULT_SEQ_LEN,
        vocab: int = DEFAULT_VOCAB,
        parameters: float | None = None,
    ) -> ModelShape:
        """The shape given, with Psi = 12*L*h^2 + V*h unless an exact count is given too
        (models whose MLP is not 4h wide, SwiGLU ones, differ from the formula)."""
        count = parameters if parameters is not None else 12 * layers * hidden**2 + vocab * hidden
        return cls(count, layers, hidden, heads, seq_len, vocab)

    @classmethod
    def from_parameters(cls, parameters: float, seq_len: int = DEFAULT_SEQ_LEN) -> ModelShape:
        """Only a parameter count: a GPT-3-like shape is assumed for the estimates."""
        if not parameters > 0:
            raise PlanError("impossible model shape", [f"parameters must be more than 0, not {parameters:g}"])
        layers = max(1, round((parameters / (12 * _HEAD**2)) ** (1 / 3)))
        return cls(parameters, layers, _HEAD * layers, layers, seq_len, vocab=0, assumed=True)

    def describe(self) -> str:
        count = f"{human_count(self.parameters)} parameters"
        if self.assumed:
            shape = f"{self.layers} layers, hidden {self.hidden}, {self.heads} heads, sequence {self.seq_len}"
            return f"{count} (shape assumed GPT-3-like: {shape})"
        return f"{count} ({self.layers} layers, hidden {self.hidden}, {self.heads} heads, sequence {self.seq_len}, vocabulary {self.vocab})"


@dataclass(frozen=True)
class Hardware:
    """The GPUs of one job. Bandwidths are per GPU, one direction; inter-node is the GPU's share of its node's injection bandwidth."""

    gpus: int
    gpus_per_node: int
    memory_gb: float
    intra_node_gbps: float = DEFAULT_INTRA_NODE_GBPS
    inter_node_gbps: float = DEFAULT_INTER_NODE_GBPS
    peak_tflops: float | None = None  # dense 16-bit, per GPU; prices the pipeline bubble

    def __post_init__(self) -> None:
        problems = [
            f"{what} must be at least 1, not {value}"
            for what, value in (("GPU count", self.gpus), ("GPUs per node", self.gpus_per_node))
            if value < 1
        ]
        for what, value in (
            ("GPU memory", self.memory_gb),
            ("intra-node bandwidth", self.intra_node_gbps),
            ("inter-node bandwidth", self.inter_node_gbps),
        ):
            if not value > 0:
                problems.append(f"{what} must be more than 0, not {value:g}")
        if self.peak_tflops is not None and not self.peak_tflops > 0:
            problems.append(f"peak TFLOP/s must be more than 0, not {self.peak_tflops:g}")
        if not problems and self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            # Jobs get whole nodes: a remainder would be a node partly used, or GPUs that do not exist.
            n = self.gpus_per_node
            below, above = self.gpus // n * n, (self.gpus // n + 1) * n
            problems.append(
                f"{self.gpus} GPUs do not fill whole nodes of {n}: {self.gpus} is not a multiple of {n} "
                f"(use {below} or {above} GPUs, that is {below // n} or {above // n} nodes)"
            )
        if problems:
            raise PlanError("impossible hardware", problems)

    @property
    def node_size(self) -> int:
        """GPUs per node this job uses (all of a node's, unless the job is smaller than one)."""
        return min(self.gpus, self.gpus_per_node)

    @property
    def nodes(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_node)


@dataclass(frozen=True)
class Memory:
    """Memory per GPU in GB."""

    parameters: float
    gradients: float
    optimizer: float
    activations: float = 0.0

    @property
    def model_states(self) -> float:
        return self.parameters + self.gradients + self.optimizer

    @property
    def total(self) -> float:
        return self.model_states + self.activations

    def breakdown(self) -> str:
        states = f"parameters {gb(self.parameters)} + gradients {gb(self.gradients)} + optimizer {gb(self.optimizer)}"
        return f"{states} + activations {gb(self.activations)}"


@dataclass(frozen=True)
class Comm:
    """Predicted seconds per step in each kind of communication, and where each group's ring runs (None: a group of one)."""

    data_s: float
    tensor_s: float
    pipeline_s: float
    data_link: Link | None
    tensor_link: Link | None
    pipeline_link: Link | None
    bubble: float  # idle fraction of the compute time, (p-1)/m
    bubble_s: float | None  # that fraction in seconds, when the peak FLOP/s is known

    @property
    def total_s(self) -> float:
        return self.data_s + self.tensor_s + self.pipeline_s


def model_states(parameters: float, data: int, zero: int, model_parallel: int = 1) -> Memory:
    """Model-state memory per GPU (GB), from the ZeRO paper's formulas (module docstring)."""
    if zero not in ZERO_STAGES:
        raise PlanError(
            f"ZeRO stage {zero} does not exist", hints=["stages: 0 (none), 1 (optimizer), 2 (+ gradients), 3 (+ parameters; FSDP)"]
        )
    share = parameters / model_parallel
    return Memory(
        parameters=WEIGHT_BYTES * share / (data if zero >= 3 else 1) / GB,
        gradients=GRADIENT_BYTES * share / (data if zero >= 2 else 1) / GB,
        optimizer=ADAM_K * share / (data if zero >= 1 else 1) / GB,
    )


def activations_gb(
    model: ModelShape, micro_batch: int, tensor: int, pipeline: int, microbatches: int, recompute: Recompute = "none"
) -> float:
    """Activation memory of the first pipeline stage, per GPU (GB): Korthikanti et al. 2022."""
    s, b, h, a = model.seq_len, micro_batch, model.hidden, model.heads
    if recompute == "full":
        per_layer: float = s * b * h * 2  # the paper's Table 2: full recomputation is not divided by t
    elif recompute == "selective":
        per_layer = s * b * h * 34 / tensor
    else:
        per_layer = s * b * h * (34 + 5 * a * s / h) / tensor
    in_flight = min(microbatches, pipeline)  # 1F1B: the first stage holds at most p micro-batches
    return per_layer * model.layers / pipeline * in_flight / GB


def ring_allreduce_s(nbytes: float, n: int, gbps: float) -> float:
    """Seconds for a ring all-reduce of ``nbytes`` over ``n`` GPUs at ``gbps`` GB/s per GPU."""
    return 2 * (n - 1) / n * nbytes / (gbps * GB) if n > 1 else 0.0


def communication(
    model: ModelShape,
    hw: Hardware,
    data: int,
    tensor: int,
    pipeline: int,
    zero: int,
    micro_batch: int,
    microbatches: int,
    global_batch: int,
    recompute: Recompute = "none",
) -> Comm:
    """The predicted communication of one training step (the module docstring has the model)."""
    m = microbatches

    def link(span: int, size: int) -> tuple[Link | None, float]:
        if size == 1:
            return None, hw.intra_node_gbps
        return ("node", hw.intra_node_gbps) if span <= hw.node_size else ("network", hw.inter_node_gbps)

    data_link, data_bw = link(tensor * data, data)
    grads = GRADIENT_BYTES * model.parameters / (tensor * pipeline)
    rings = {0: 2.0, 1: 2.0, 2: m + 1.0, 3: 3.0 * m}[zero]  # in reduce-scatter/all-gather halves
    data_s = rings / 2 * ring_allreduce_s(grads, data, data_bw)

    tensor_link, tensor_bw = link(tensor, tensor)
    activation = ACTIVATION_BYTES * model.seq_len * micro_batch * model.hidden
    per_layer = 6 if recompute == "full" else 4
    tensor_s = model.layers / pipeline * m * per_layer * ring_allreduce_s(activation, tensor, tensor_bw)

    pipeline_link, pipeline_bw = link(hw.gpus, pipeline)
    pipeline_s = 2 * m * activation / tensor / (pipeline_bw * GB) if pipeline > 1 else 0.0

    bubble = (pipeline - 1) / m
    bubble_s = None
    if hw.peak_tflops is not None:
        flops = (8 if recompute == "full" else 6) * model.parameters * global_batch * model.seq_len
        bubble_s = bubble * flops / (hw.gpus * hw.peak_tflops * 1e12)
    return Comm(data_s, tensor_s, pipeline_s, data_link, tensor_link, pipeline_link, bubble, bubble_s)


def gb(value: float) -> str:
    """A size or time for people: three significant figures at most, no trailing zeros (56.9, 39, 1.88)."""
    if value >= 100:
        text = f"{value:.0f}"
    elif value >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def human_count(n: float) -> str:
    """13000000000 -> 13B, 7.5e9 -> 7.5B, 350e6 -> 350M."""
    for factor, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= factor:
            return f"{gb(n / factor)}{suffix}"
    return gb(n)
