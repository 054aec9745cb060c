"""The Lightning module that pretrains a :mod:`gpt` model on next-token prediction, with an optional goldfish loss."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from experiments.common import speed
from experiments.common.callbacks import log_step
from experiments.lm import goldfish, gpt


class CausalLM(pl.LightningModule):
    def __init__(
        self, model: str, vocab_size: int, seq_len: int, lr: float, goldfish_k: int | None = None, goldfish_h: int = goldfish.DEFAULT_H
    ):
        super().__init__()
        # Stored in the checkpoint: CausalLM.load_from_checkpoint rebuilds the network.
        self.save_hyperparameters()
        goldfish.check(goldfish_k, goldfish_h)
        self.net = gpt.build(model, vocab_size, seq_len)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.net(tokens)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch[:, :-1], batch[:, 1:]
        # With goldfish, a mean over this rank's kept tokens; DDP then averages the
        # ranks, so 1 x 4 and 2 x 2 agree but 1 x 1 of the same global batch differs
        # slightly (its mean is over all kept tokens at once).
        loss = goldfish.loss(self(inputs), targets, self.hparams["goldfish_k"], self.hparams["goldfish_h"])
        # This rank's loss only: a per-step all-reduce would sit inside the timed steps.
        self.last_train_loss = loss.detach()
        log_step(self, train_loss=loss)
        return loss

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        # Every token counts in validation: the goldfish mask shapes training only. Eager
        # (forward, not the compiled call): validation runs once, after the timed steps, in eval
        # mode and with a last partial batch, each a new compile that would take longer than it saves.
        logits = self.net.forward(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        self.log("val_loss", loss, batch_size=len(batch), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # GPT's betas: a shorter second-moment memory than Adam's default 0.999 is steadier on language data.
        return speed.adamw(self.parameters(), lr=self.hparams["lr"], betas=(0.9, 0.95))
