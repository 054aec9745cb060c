"""Checkpoint-and-requeue: the training side of the orchestrator's requeue protocol.

Before a job's time limit Slurm sends every task the profile's requeue signal
(``ORCH_REQUEUE_SIGNAL``, e.g. USR1). Each rank notes it; at the next step
boundary the ranks agree (a max all-reduce, so they stop at the same step even
if the signal reached them at different moments), save a checkpoint together
and stop; the process then exits with :data:`REQUEUE_EXIT`. The job script,
outside the container, requeues the job; the next run resumes from the
checkpoint. Lightning's own handler is turned off: it would call ``scontrol``
from inside the container, where there is none.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytorch_lightning as pl
import torch

REQUEUE_EXIT = 75  # EX_TEMPFAIL; equals orchestrator.scripts.plan.REQUEUE_EXIT, which the job scripts test


class CheckpointOnSignal(pl.Callback):
    def __init__(self, path: Path, signame: str | None = None) -> None:
        self.path = path
        self.signum = getattr(signal, "SIG" + (signame or os.environ.get("ORCH_REQUEUE_SIGNAL", "USR1")))
        self.signalled = False
        self.checkpointed = False
        # Taken over at once, not only at setup: the job script ignores the signal until
        # Python handles it, so one that came while the run loaded its data or trained
        # its tokenizer (minutes, on big data) was lost and the job ran into its limit.
        # Noted now, it stops the run after its first step, checkpointed.
        signal.signal(self.signum, self._note)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        signal.signal(self.signum, self._note)  # again: the trainer's own signal set-up comes before

    def _note(self, signum, frame) -> None:
        self.signalled = True  # act at the next step boundary, not inside the handler

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self._agreed(trainer, pl_module.device):
            # Written beside, renamed into place: a kill at the hard limit never
            # leaves half a checkpoint to resume from.
            partial = self.path.with_name(self.path.name + ".partial")
            trainer.save_checkpoint(partial)  # every rank: it synchronises; rank 0 writes
            if trainer.is_global_zero:
                os.replace(partial, self.path)
                marker = os.environ.get("ORCH_REQUEUE_MARKER")
                if marker:  # tells the job script to run us again (see the templates)
                    Path(marker).touch()
            # Hold every rank until the checkpoint is in place: the first rank to exit
            # non-zero makes srun (--kill-on-bad-exit) kill the others.
            trainer.strategy.barrier("requeue-checkpoint")
            self.checkpointed = True
            trainer.should_stop = True

    def _agreed(self, trainer: pl.Trainer, device: torch.device) -> bool:
        """Whether any rank has seen the signal. One process asks no one: the all-reduce's
        ``.item()`` would make the host wait for the GPU at every step, leaving it idle
        while the next step is set up."""
        if trainer.world_size == 1:
            return self.signalled
        flag = torch.tensor(float(self.signalled), device=device)
        return trainer.strategy.reduce(flag, reduce_op="max").item() > 0


def checkpoint_path(model_dir: Path) -> Path:
    """Where the requeue checkpoint lives: inside the run's model output (a DVC out),
    because what a job must keep is exactly its declared outputs. When the job runs
    from a copy on fast storage (staging), those are copied back before the requeue,
    so the next run resumes even on other nodes."""
    return model_dir / "requeue.ckpt"


def resume_path(path: Path) -> Path | None:
    """The checkpoint to resume from, if an earlier run of this job left one."""
    return path if path.is_file() else None


def slurm_plugins() -> list:
    """Under Slurm, Lightning's SLURMEnvironment without its own requeue (see above); elsewhere none."""
    from lightning_fabric.plugins.environments import SLURMEnvironment

    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []
