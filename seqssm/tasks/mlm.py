"""Masked language modelling (BERT-style pretraining): loss and accuracy on the selected positions."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from seqssm.errors import ConfigError

from .base import SequenceTask, StepResult

SELECT_PROB = 0.15
MASK_PROB, RANDOM_PROB = 0.8, 0.1  # of the selected positions; the remaining 10% keep their token


def mask_tokens(inputs: torch.Tensor, lengths: torch.Tensor | None, vocab_size: int, mask_token_id: int,
                select_prob: float = SELECT_PROB, generator: torch.Generator | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(corrupted inputs, selected (B, L) bool) by BERT's rule over the real (unpadded) positions.

    Each real position is selected with `select_prob`; a selected position becomes
    `mask_token_id` with p=0.8, a uniformly random token with p=0.1, and stays as it is
    with p=0.1. A sequence with no selected position gets one, so every sequence has a loss.
    """
    B, L = inputs.shape
    kw = {"device": inputs.device, "generator": generator}
    real = torch.ones(B, L, dtype=torch.bool, device=inputs.device)
    if lengths is not None:
        real = torch.arange(L, device=inputs.device)[None, :] < lengths[:, None]
    scores = torch.rand(B, L, **kw).masked_fill(~real, 2.0)
    selected = scores < select_prob
    # fallback: the real position with the lowest score of a sequence that drew none
    none = ~selected.any(1) & real.any(1)
    selected[none, scores[none].argmin(1)] = True
    action = torch.rand(B, L, **kw)
    to_mask = selected & (action < MASK_PROB)
    to_random = selected & (action >= MASK_PROB) & (action < MASK_PROB + RANDOM_PROB)
    random_tokens = torch.randint(0, vocab_size, (B, L), **kw)
    corrupted = torch.where(to_mask, torch.full_like(inputs, mask_token_id), inputs)
    corrupted = torch.where(to_random, random_tokens.to(inputs.dtype), corrupted)
    return corrupted, selected


class MaskedLM(SequenceTask):
    """Recover 15% of the tokens from the corrupted sequence; bidirectional models are welcome."""

    metric_name = "acc"
    monitor_mode = "max"

    def validate_dimensions(self) -> None:
        hp = self.hparams
        if hp.vocab_size is None:
            raise ConfigError("MaskedLM.vocab_size is None: masked language modelling needs token inputs; this "
                              "DataModule gives numeric features (d_input). Use a categorical data mode.")
        if hp.mask_token_id is None:
            raise ConfigError("MaskedLM.mask_token_id is None: the DataModule defines no [MASK] token; "
                              "set model.init_args.mask_token_id or use a DataModule that has one (species)")

    def model_outputs(self) -> dict:
        return {"n_classes": None}

    def evaluate(self, batch: dict[str, torch.Tensor], split: str, batch_idx: int) -> StepResult:
        inputs, lengths = batch["inputs"], batch.get("lengths")
        generator = None
        if split != "train":
            # fixed masks for evaluation, so val/test numbers are comparable across epochs and runs
            generator = torch.Generator(device=inputs.device).manual_seed(batch_idx)
        corrupted, selected = mask_tokens(inputs, lengths, self.hparams.vocab_size, self.hparams.mask_token_id,
                                          generator=generator)
        logits = self.network(corrupted, lengths=lengths)[selected]
        targets = inputs[selected]
        loss = F.cross_entropy(logits.float(), targets)
        correct = (logits.argmax(-1) == targets).float()
        return StepResult(loss, len(targets), correct, 1.0)
