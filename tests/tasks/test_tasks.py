"""Tasks on tiny data: losses, metrics per split, masking rule, optimisation, config errors, NaN guard."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seqssm.optim import param_groups
from seqssm.tasks import Classification, ConfigError, MaskedLM, NextTokenPrediction, NonFiniteLossError, mask_tokens
from seqssm.tasks.checkpoint import TaskCheckpoint
from seqssm.tasks.resume import ResumableTrainData
from seqssm.tasks.schedule import warmup_cosine

from .helpers import MASK, TINY, VOCAB, PoisonAt, TinyTokens, a_batch, make_task, make_trainer, one_thread  # noqa: F401


def test_classification_learns_and_logs_every_split():
    data = TinyTokens()
    task = make_task(lr=1e-2)
    trainer = make_trainer(max_epochs=4)
    trainer.fit(task, data)
    metrics = trainer.callback_metrics
    assert {"train_loss", "train_acc", "val_loss", "val_acc"} <= set(metrics)
    assert metrics["val_acc"] > 0.8  # chance is 1/3
    result = trainer.test(task, data, verbose=False)[0]
    assert set(result) == {"test_loss", "test_acc"} and result["test_acc"] > 0.8


def test_classification_pools_over_real_length_only():
    data = TinyTokens()
    task = make_task().eval()
    batch = a_batch(data)
    assert (batch["lengths"] < batch["inputs"].shape[1]).any(), "the batch must hold padded sequences"
    garbage = batch["inputs"].clone()
    pad = torch.arange(garbage.shape[1])[None, :] >= batch["lengths"][:, None]
    garbage[pad] = 7
    with torch.no_grad():
        clean = task.evaluate(batch, "val", 0)
        noisy = task.evaluate({**batch, "inputs": garbage}, "val", 0)
    torch.testing.assert_close(noisy.loss, clean.loss)
    torch.testing.assert_close(noisy.metric, clean.metric)


def test_ntp_loss_is_shifted_cross_entropy_over_real_tokens():
    data = TinyTokens()
    task = make_task(NextTokenPrediction).eval()
    batch = a_batch(data)
    with torch.no_grad():
        result = task.evaluate(batch, "val", 0)
        logits = task.model(batch["inputs"], lengths=batch["lengths"])
    losses = [F.cross_entropy(logits[b, : n - 1], batch["inputs"][b, 1:n], reduction="sum")
              for b, n in enumerate(batch["lengths"].tolist())]
    n_targets = int((batch["lengths"] - 1).sum())
    torch.testing.assert_close(result.loss, torch.stack(losses).sum() / n_targets)
    assert result.loss_weight == n_targets


def test_ntp_logs_perplexity_as_exp_of_token_loss():
    data = TinyTokens()
    trainer = make_trainer(max_epochs=1, limit_train_batches=2)
    trainer.fit(make_task(NextTokenPrediction), data)
    metrics = trainer.callback_metrics
    assert {"train_loss", "train_ppl", "val_loss", "val_ppl"} <= set(metrics)
    torch.testing.assert_close(metrics["val_ppl"], metrics["val_loss"].exp(), rtol=1e-5, atol=0)


def test_ntp_refuses_a_bidirectional_model():
    with pytest.raises(ConfigError, match="causal"):
        make_task(NextTokenPrediction, model="mamba-s6-bi")


def test_mask_tokens_follows_bert_rule():
    g = torch.Generator().manual_seed(0)
    B, L = 256, 400
    inputs = torch.randint(4, VOCAB, (B, L), generator=g)
    lengths = torch.randint(1, L + 1, (B,), generator=g)
    corrupted, selected = mask_tokens(inputs, lengths, VOCAB, MASK, generator=g)
    real = torch.arange(L)[None, :] < lengths[:, None]
    assert not (selected & ~real).any(), "padding must never be selected"
    assert selected.any(1).all(), "every sequence gets at least one prediction"
    assert torch.equal(corrupted[~selected], inputs[~selected])
    assert abs(selected.sum().item() / real.sum().item() - 0.15) < 0.01
    n = selected.sum().item()
    masked = (corrupted[selected] == MASK).sum().item() / n
    kept = (corrupted[selected] == inputs[selected]).sum().item() / n
    assert abs(masked - 0.8) < 0.01
    assert abs(kept - (0.1 + 0.1 / VOCAB)) < 0.01  # 10% left alone, plus random draws that hit the same token
    assert abs(1 - masked - kept - 0.1 * (1 - 1 / VOCAB)) < 0.01


def test_mlm_loss_is_on_selected_positions_only():
    data = TinyTokens()
    task = make_task(MaskedLM, model="mamba-s6-bi").eval()
    batch = a_batch(data)
    with torch.no_grad():
        result = task.evaluate(batch, "val", 5)
        corrupted, selected = mask_tokens(batch["inputs"], batch["lengths"], VOCAB, MASK,
                                          generator=torch.Generator().manual_seed(5))
        logits = task.model(corrupted, lengths=batch["lengths"])
    torch.testing.assert_close(result.loss, F.cross_entropy(logits[selected], batch["inputs"][selected]))
    assert result.loss_weight == int(selected.sum())


def test_mlm_trains_a_bidirectional_model():
    trainer = make_trainer(max_epochs=1, limit_train_batches=2)
    trainer.fit(make_task(MaskedLM, model="mamba-s6-bi"), TinyTokens())
    assert {"train_loss", "train_acc", "val_loss", "val_acc"} <= set(trainer.callback_metrics)


def test_optimizer_uses_tagged_groups_and_cosine_to_a_tenth():
    task = make_task(lr=1e-2, weight_decay=0.01)
    trainer = make_trainer(max_epochs=2)
    trainer.fit(task, TinyTokens())
    optimizer = trainer.optimizers[0]
    assert isinstance(optimizer, torch.optim.AdamW)
    expected = param_groups(task.model, 1e-2, 0.01)
    assert sorted(g["initial_lr"] for g in optimizer.param_groups) == sorted(g["lr"] for g in expected)
    tagged = [p for p in task.model.parameters() if hasattr(p, "_optim")]
    assert any(p._optim["lr_scale"] == 0.1 for p in tagged), "the S6 layer tags its A for 0.1x lr"
    for group in optimizer.param_groups:
        for p in group["params"]:
            if hasattr(p, "_optim"):
                assert group["initial_lr"] == pytest.approx(1e-2 * p._optim["lr_scale"])
                assert group["weight_decay"] == p._optim["weight_decay"]
    # after the last step the schedule sits at min_lr_ratio of the peak
    assert max(g["lr"] for g in optimizer.param_groups) == pytest.approx(1e-3)


def test_warmup_cosine_shape():
    assert warmup_cosine(0, 100, warmup_steps=10) == pytest.approx(0.1)
    assert warmup_cosine(9, 100, warmup_steps=10) == pytest.approx(1.0)
    assert warmup_cosine(55, 100, warmup_steps=10) == pytest.approx(0.55)
    assert warmup_cosine(100, 100, warmup_steps=10) == pytest.approx(0.1)
    assert warmup_cosine(0, 100) == pytest.approx(1.0)


@pytest.mark.parametrize("kwargs, field", [
    ({"lr": -1.0}, "lr"), ({"lr": float("nan")}, "lr"), ({"weight_decay": -0.1}, "weight_decay"),
    ({"min_lr_ratio": 2.0}, "min_lr_ratio"), ({"warmup_steps": -5}, "warmup_steps"),
    ({"model": "mamba-s7"}, "mamba-s7"), ({"model_overrides": {"d_modle": 8}}, "model_overrides"),
])
def test_bad_values_fail_naming_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        make_task(**kwargs)


def test_classification_needs_classes():
    with pytest.raises(ConfigError, match="n_classes"):
        Classification(model="mamba-s6", model_overrides=TINY, vocab_size=VOCAB, n_classes=None)


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    checkpoint = TaskCheckpoint(dirpath=tmp_path / "ckpt", last_every_n_train_steps=1)
    trainer = make_trainer(tmp_path, max_epochs=3, enable_checkpointing=True,
                           callbacks=[ResumableTrainData(), checkpoint, PoisonAt(step=3)])
    with pytest.raises(NonFiniteLossError, match="global step 3") as info:
        trainer.fit(make_task(), TinyTokens())
    # last.ckpt held step 3 itself, which resumed exactly gives the same loss: the generation before is put back
    assert f"Last good checkpoint: {tmp_path / 'ckpt' / 'last.ckpt'} (global step 2)" in str(info.value)
    last = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 2
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values())
    assert math.isfinite(last["state_dict"]["model.head.weight"].sum().item())
