"""The Lightning module that trains a :mod:`models` network on a :mod:`data` classification task."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from experiments.classify import models
from experiments.common import speed
from experiments.common.callbacks import log_step


class TextClassifier(pl.LightningModule):
    def __init__(self, model: str, vocab_size: int, seq_len: int, num_classes: int, lr: float):
        super().__init__()
        # Stored in the checkpoint: TextClassifier.load_from_checkpoint rebuilds the network.
        self.save_hyperparameters()
        self.net = models.build(model, vocab_size, seq_len, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.net(tokens)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        tokens, labels = batch
        loss = F.cross_entropy(self(tokens), labels)
        # This rank's loss only: a per-step all-reduce would sit inside the timed steps.
        self.last_train_loss = loss.detach()
        log_step(self, train_loss=loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        tokens, labels = batch
        logits = self.net.forward(tokens)  # eager: see experiments.lm.module's validation_step
        self.log("val_loss", F.cross_entropy(logits, labels), batch_size=len(labels), sync_dist=True)
        self.log("val_accuracy", (logits.argmax(dim=-1) == labels).float().mean(), batch_size=len(labels), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return speed.adamw(self.parameters(), lr=self.hparams["lr"])
