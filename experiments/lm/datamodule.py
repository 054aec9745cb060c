"""The language model's loaders, built when the trainer asks for them.

Lightning asks after it has restored a checkpoint and set up the process group,
so the training order can start at the restored global step on this rank's slice
(see :mod:`experiments.lm.sampler`). Lightning must not add its own distributed
sampler (``use_distributed_sampler=False`` in the trainer): the order shards itself.
"""

from __future__ import annotations

import pytorch_lightning as pl
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

from experiments.lm.data import LMData
from experiments.lm.sampler import StepBatchSampler, StepLoader


class LMDataModule(pl.LightningDataModule):
    def __init__(self, data: LMData, batch_size: int, seed: int, num_workers: int = 0, val_rows: int = 0):
        super().__init__()
        self.data = data
        self.batch_size = batch_size  # per device
        self.seed = seed
        self.num_workers = num_workers
        # TokenRows is a map-style Dataset by its methods, not by torch's class (shards.py imports no torch).
        self.val = evenly_spaced(data.val, val_rows)  # type: ignore[arg-type]

    def train_dataloader(self) -> StepLoader:
        trainer = self.trainer
        assert trainer is not None  # Lightning asks for loaders once the module is attached
        sampler = StepBatchSampler(
            num_items=len(self.data.train),
            batch_size=self.batch_size,
            rank=trainer.global_rank,
            world_size=trainer.world_size,
            seed=self.seed,
            start_step=trainer.global_step,  # restored from the checkpoint by now
            steps=trainer.max_steps,
        )
        sampler.ahead = getattr(self.data.train, "will_need", None)
        return StepLoader(self.data.train, sampler, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        trainer = self.trainer
        assert trainer is not None
        # Each rank a share; where the rows do not divide, a few repeat so every rank runs as many batches.
        shard: DistributedSampler = DistributedSampler(self.val, num_replicas=trainer.world_size, rank=trainer.global_rank, shuffle=False)
        return DataLoader(self.val, self.batch_size, sampler=shard, num_workers=self.num_workers)


def evenly_spaced(rows: Dataset, count: int) -> Dataset:
    """``count`` rows spread evenly over ``rows`` (every shard's part of the split), or all of
    them when ``count`` is 0 or not fewer. A pass over the whole held-out split of a corpus of
    billions of tokens would take longer than the training it checks; a fixed sample keeps the
    validation loss comparable between runs and layouts (every layout reads the same rows)."""
    total = len(rows)  # type: ignore[arg-type]  # torch's Dataset declares no __len__ (a map-style one may lack it); these have one
    if not count or count >= total:
        return rows
    return Subset(rows, [i * total // count for i in range(count)])
