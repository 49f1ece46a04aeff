"""Next-token prediction (causal pretraining): shifted cross-entropy, perplexity."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seqssm.errors import ConfigError

from .base import ExpMeanMetric, SequenceTask, StepResult


def shifted_targets(inputs: torch.Tensor, lengths: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(targets (B, L-1) = inputs shifted left by one, valid (B, L-1) bool: the target is a real token)."""
    targets = inputs[:, 1:]
    if lengths is None:
        return targets, torch.ones_like(targets, dtype=torch.bool)
    positions = torch.arange(targets.shape[1], device=inputs.device)
    return targets, positions[None, :] < (lengths[:, None] - 1)


class NextTokenPrediction(SequenceTask):
    """Predict token t+1 from tokens <= t; needs a causal model and token inputs."""

    metric_name = "ppl"
    metric_class = ExpMeanMetric

    def validate_dimensions(self) -> None:
        if self.hparams.vocab_size is None:
            raise ConfigError("NextTokenPrediction.vocab_size is None: next-token prediction needs token inputs; "
                              "this DataModule gives numeric features (d_input). Use a categorical data mode.")

    def model_outputs(self) -> dict:
        return {"n_classes": None}

    def check_model(self, model: nn.Module) -> None:
        if not getattr(model, "causal", False):
            raise ConfigError(f"NextTokenPrediction needs a causal model, but {self.hparams.model!r} is not causal "
                              "(it sees future tokens, so predicting them is trivial). Use a causal model such as "
                              "'mamba-s6', or MaskedLM for bidirectional models.")

    def evaluate(self, batch: dict[str, torch.Tensor], split: str, batch_idx: int) -> StepResult:
        inputs, lengths = batch["inputs"], batch.get("lengths")
        logits = self.network(inputs, lengths=lengths)[:, :-1]
        targets, valid = shifted_targets(inputs, lengths)
        loss = F.cross_entropy(logits[valid].float(), targets[valid])
        n = int(valid.sum())
        return StepResult(loss, n, loss.detach(), n)
