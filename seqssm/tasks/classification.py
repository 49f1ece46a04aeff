"""Sequence classification: pooled logits, cross-entropy, accuracy."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from seqssm.errors import ConfigError

from .base import SequenceTask, StepResult


class Classification(SequenceTask):
    """One label per sequence (LRA, sMNIST, species); the model pools over each sequence's real length."""

    metric_name = "acc"
    monitor_mode = "max"

    def validate_dimensions(self) -> None:
        if not self.hparams.n_classes or self.hparams.n_classes < 2:
            raise ConfigError(f"Classification.n_classes must be >= 2, got {self.hparams.n_classes!r}: the "
                              "DataModule has no labels (e.g. species task='ntp'/'mlm'); use a labelled data "
                              "setting, or NextTokenPrediction / MaskedLM")

    def model_outputs(self) -> dict:
        return {"n_classes": self.hparams.n_classes}

    def evaluate(self, batch: dict[str, torch.Tensor], split: str, batch_idx: int) -> StepResult:
        if "labels" not in batch:
            raise KeyError("Classification needs batches with `labels`; this DataModule yields none")
        logits = self.network(batch["inputs"], lengths=batch.get("lengths"))
        labels = batch["labels"]
        loss = F.cross_entropy(logits.float(), labels)
        correct = (logits.argmax(-1) == labels).float()
        return StepResult(loss, len(labels), correct, 1.0)
