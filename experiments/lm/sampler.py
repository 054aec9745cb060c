"""The training order as a function of the global step: what makes a resumed run continue the same data.

All ranks read one endless stream of item indices: pass p over the N items is a
permutation seeded by (seed, p). Step s takes the stream's next global batch,
positions [s*G, (s+1)*G), and rank r takes its slice [s*G + r*b, s*G + (r+1)*b)
of it (b per device, G = b x world size). A batch is thus fixed by (seed, G, s)
alone: a run resumed at step s starts exactly where the interrupted one stopped,
with no loader state to save, and layouts of the same global batch (1 x 4 or
2 x 2) train on the same batches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

from experiments.common.timedloader import TimedLoader

# Steps whose rows are asked for ahead of time: two steps' compute for the kernel to read them.
LOOKAHEAD = 2


class StepBatchSampler(Sampler[list[int]]):
    """Batches for steps ``start_step`` up to ``steps`` (exclusive) of the rank's slice (see the module).

    ``len()`` is ``steps`` however late it starts: Lightning counts a resumed epoch's
    batches from where the checkpoint left it, so the epoch must keep its full length.
    """

    def __init__(self, num_items: int, batch_size: int, rank: int, world_size: int, seed: int, start_step: int, steps: int):
        if num_items < 1:
            raise ValueError("no items to sample from")
        self.num_items = num_items
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.start_step = start_step
        self.steps = steps
        self._passes: dict[int, np.ndarray] = {}
        # Told the next step's rows ahead of time (the dataset's will_need: the kernel reads them meanwhile).
        self.ahead: Callable[[list[int]], None] | None = None

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[list[int]]:
        told: dict[int, list[int]] = {}  # the batches announced ahead, each computed once
        for step in range(self.start_step, self.steps):
            if self.ahead is not None:
                # The rows of the steps LOOKAHEAD ahead, read in the background while these compute.
                for later in range(step + 1 if step == self.start_step else step + LOOKAHEAD, min(step + LOOKAHEAD + 1, self.steps)):
                    told[later] = self.batch(later)
                    self.ahead(told[later])
            yield told.pop(step) if step in told else self.batch(step)

    def batch(self, step: int) -> list[int]:
        first = (step * self.world_size + self.rank) * self.batch_size
        return [int(self._permutation(p // self.num_items)[p % self.num_items]) for p in range(first, first + self.batch_size)]

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch not in self._passes:
            # sha256 of both numbers: distinct (seed, pass) pairs never share a generator seed by arithmetic accident.
            seed = int.from_bytes(hashlib.sha256(f"{self.seed}:{epoch}".encode()).digest()[:8], "little")
            # Two passes kept: a global batch spans at most two when it is smaller than the data.
            self._passes = {e: p for e, p in self._passes.items() if e == epoch - 1}
            order = torch.randperm(self.num_items, generator=torch.Generator().manual_seed(seed)).numpy()
            # A numpy array of the narrowest type, not a list: 7M rows (a 2 GB corpus) were 250 MB of Python
            # ints in every rank; as int32 they are 28 MB. Megatron keeps its shuffle index the same way.
            self._passes[epoch] = order.astype(np.int32) if self.num_items < 2**31 else order
        return self._passes[epoch]

    def identity(self) -> dict[str, int]:
        """What fixes the order, besides the step: a resumed run must match it."""
        return {"seed": self.seed, "global_batch_size": self.batch_size * self.world_size, "num_items": self.num_items}


class StepLoader(TimedLoader):
    """A DataLoader over a :class:`StepBatchSampler` that Lightning treats as resumable (and timed: see
    :class:`~experiments.common.datawait.DataWait`).

    Its state is the order's identity, not a position (the position is the global
    step, which Lightning restores). Loading a checkpoint made with another seed,
    global batch or dataset raises, rather than silently training on another order.
    """

    batch_sampler: StepBatchSampler  # what __init__ gives DataLoader (it types the attribute as any sampler)

    def __init__(self, dataset: Any, batch_sampler: StepBatchSampler, **kwargs: Any):
        super().__init__(dataset, batch_sampler=batch_sampler, **kwargs)

    def state_dict(self) -> dict[str, int]:
        return self.batch_sampler.identity()

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        current = self.batch_sampler.identity()
        if dict(state_dict) != current:
            raise ValueError(
                f"the checkpoint was written with data order {dict(state_dict)}, this run has {current}: "
                "resume with the same --seed, global batch and --data, or remove the checkpoint"
            )
