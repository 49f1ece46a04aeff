"""`SequenceTask`: the LightningModule every task shares.

It builds the network from a registry name plus overrides (dimensions linked from the
DataModule), sets up AdamW with the tagged SSM groups and the warmup + cosine schedule,
starts from pretrained weights (`init_from`), stops on a non-finite loss, and logs
`{split}_loss` and `{split}_{metric}` for train, val and test. Subclasses say how a batch
becomes a loss (`evaluate`) and which model outputs they need (`model_outputs`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import nn
from torchmetrics import MeanMetric

from seqssm.errors import ConfigError, NonFiniteLossError

from ..models.hub import provenance_record
from ..models.loading import CHECKPOINT_MODEL_CONFIG, CHECKPOINT_PROVENANCE, CHECKPOINT_TASK, read_weights
from ..optim import param_groups
from .pretrained import LoadReport, load_weights
from .schedule import length_scaled_lr, warmup_cosine

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")


@dataclass
class StepResult:
    """One batch's loss and metric, with the weights (example or token counts) for epoch averages."""

    loss: torch.Tensor
    loss_weight: float | torch.Tensor
    metric: torch.Tensor
    metric_weight: float | torch.Tensor


class ExpMeanMetric(MeanMetric):
    """exp of a weighted mean: perplexity from per-token cross-entropy."""

    def compute(self) -> torch.Tensor:
        return torch.exp(super().compute())


COMPILE_ARGUMENTS = ("fullgraph", "dynamic", "backend", "mode", "options", "disable")


def compile_options(task: str, compile: bool | dict[str, Any]) -> dict[str, Any] | None:
    """The torch.compile arguments of a task's `compile` setting (None: eager); one graph unless it says otherwise."""
    if isinstance(compile, bool):
        return {"fullgraph": True} if compile else None
    _check(isinstance(compile, dict) and set(compile) <= set(COMPILE_ARGUMENTS), task, "compile",
           f"true, false or a dict of torch.compile arguments ({', '.join(COMPILE_ARGUMENTS)})", compile)
    return {"fullgraph": True, **compile}


def _check(cond: bool, task: str, field: str, requirement: str, value: Any) -> None:
    if not cond:
        raise ConfigError(f"{task}.{field} must be {requirement}, got {value!r} "
                          f"(set `{field}:` under model.init_args in the recipe, or --model.init_args.{field})")


class SequenceTask(L.LightningModule):
    """Shared base of Classification, NextTokenPrediction and MaskedLM; not used directly."""

    metric_name = "metric"
    metric_class: type[MeanMetric] = MeanMetric
    monitor_mode = "min"  # how ModelCheckpoint should rank `val_{metric_name}`

    def __init__(self, model: str = "mamba-s6", model_overrides: dict[str, Any] | None = None,
                 vocab_size: int | None = None, d_input: int | None = None, n_classes: int | None = None,
                 mask_token_id: int | None = None, max_length: int | None = None,
                 lr: float = 1e-3, lr_reference_length: int | None = None,
                 weight_decay: float = 0.01, betas: tuple[float, float] = (0.9, 0.999),
                 warmup_steps: int = 0, min_lr_ratio: float = 0.1,
                 init_from: str | None = None, init_strict: bool = True, reinit_head: bool = False,
                 freeze_backbone: bool = False, compile: bool | dict[str, Any] = False):
        """The task's settings (model.init_args in a recipe); jsonargparse shows each Args line in --model.help.

        Args:
            model: registry name of the network (`seqssm.models.build`), e.g. "mamba-s6".
            model_overrides: changes to that model's config (`SequenceModelConfig.replace`), e.g. {d_model: 64,
                n_layers: 2, dropout: 0.0, d_state: 8} or nested {block: {expand: 1, ssp: {lr_scale: 0.2}}}.
            vocab_size: token vocabulary size; linked from the DataModule by the CLI.
            d_input: features per step of numeric inputs; linked from the DataModule by the CLI.
            n_classes: number of classes of Classification; linked from the DataModule by the CLI.
            mask_token_id: the [MASK] token of MaskedLM; linked from the DataModule by the CLI.
            max_length: the training length, linked from the DataModule; read only by lr_reference_length.
            lr: peak learning rate; tagged SSM parameters train at their tag's fraction of it.
            lr_reference_length: Ulbaek 2024's length rule (16.3): the peak lr is lr * lr_reference_length /
                max_length, so one recipe serves every training length. None: lr as given.
            weight_decay: AdamW weight decay of untagged matrices (tagged SSM parameters get their own).
            betas: AdamW betas.
            warmup_steps: optimizer steps of linear warmup before the cosine decay.
            min_lr_ratio: the cosine decays to this fraction of `lr` at the last step.
            init_from: pretrained weights to start from: a .ckpt of `seqssm fit`, a model folder (seqssm, Hugging
                Face Mamba, mamba_ssm) or a .safetensors file; ignored when --ckpt_path resumes a run.
            init_strict: refuse weights with missing, unexpected or differently shaped keys.
            reinit_head: keep the head freshly initialised instead of loading it from init_from (e.g. new classes).
            freeze_backbone: train only the head; the rest of the network keeps its (init_from) weights.
            compile: run the network under torch.compile in every split: true for its defaults (inductor, one
                graph: fullgraph=True), or a dict of torch.compile's arguments, e.g. {backend: aot_eager} or
                {dynamic: true, mode: max-autotune}. The loss, metrics and optimizer step stay eager; weights,
                checkpoints and exports are the plain network's. `seqssm fit ... --model.init_args.compile true`.
        """
        super().__init__()
        self.save_hyperparameters()
        name = type(self).__name__
        _check(lr > 0 and math.isfinite(lr), name, "lr", "a positive number", lr)
        _check(lr_reference_length is None or lr_reference_length > 0, name, "lr_reference_length",
               "a positive length or null", lr_reference_length)
        _check(lr_reference_length is None or (max_length or 0) > 0, name, "max_length",
               "the training length (linked from the DataModule's max_length) when lr_reference_length is set",
               max_length)
        # the peak lr this run trains at: hparams keep what the recipe said
        self.peak_lr = lr if lr_reference_length is None else length_scaled_lr(lr, lr_reference_length, max_length)
        _check(weight_decay >= 0, name, "weight_decay", ">= 0", weight_decay)
        _check(all(0 <= b < 1 for b in betas), name, "betas", "two numbers in [0, 1)", betas)
        _check(warmup_steps >= 0, name, "warmup_steps", ">= 0", warmup_steps)
        _check(0 <= min_lr_ratio <= 1, name, "min_lr_ratio", "in [0, 1]", min_lr_ratio)
        _check(vocab_size is not None or d_input is not None, name, "vocab_size or d_input",
               "set (normally linked from the DataModule)", None)
        self.compile_options = compile_options(name, compile)
        self.validate_dimensions()
        self.model = self.build_model()
        self.check_model(self.model)
        if freeze_backbone:
            head = set(self.head.parameters())
            for p in self.model.parameters():
                p.requires_grad_(p in head)
        self.metrics = nn.ModuleDict()
        for split in SPLITS:
            self.metrics[f"{split}_loss"] = MeanMetric()
            self.metrics[f"{split}_{self.metric_name}"] = self.metric_class()
        for metric in self.metrics.values():
            # part of checkpoints, so a run resumed mid-epoch reports the same epoch averages
            metric.persistent(True)
        self.init_report: LoadReport | None = None
        self._rng_to_restore: torch.Tensor | None = None
        self._resumed_step: int | None = None
        self._planned_steps: int | None = None  # schedule length of the run a checkpoint was resumed from
        self.schedule_steps: int | None = None  # optimizer steps the lr schedule spans (set with the optimizer)

    # -- what subclasses provide ---------------------------------------------------------------
    def validate_dimensions(self) -> None:
        """Raise ConfigError if the linked dimensions do not suit this task."""

    def model_outputs(self) -> dict[str, Any]:
        """Keyword arguments of `seqssm.models.build` that shape the output (head size, pooling)."""
        raise NotImplementedError

    def check_model(self, model: nn.Module) -> None:
        """Raise ConfigError if the built network cannot serve this task."""

    def evaluate(self, batch: dict[str, torch.Tensor], split: str, batch_idx: int) -> StepResult:
        """Loss and metric of one batch."""
        raise NotImplementedError

    # -- model -----------------------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        """The network named by `model`, with overrides and the DataModule's dimensions."""
        from ..models import build

        hp = self.hparams
        overrides = dict(hp.model_overrides or {})
        try:
            return build(hp.model, vocab_size=hp.vocab_size, d_input=hp.d_input, **self.model_outputs(), **overrides)
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{type(self).__name__}: cannot build model {hp.model!r} with overrides {overrides}: "
                              f"{e}. Check `model` and `model_overrides` under model.init_args.") from e

    @property
    def network(self) -> nn.Module:
        """The network the steps call: `model`, or with `compile` set, `model` under torch.compile (built at the
        first call and kept outside the module tree, so that state dicts hold the plain network's weights)."""
        if self.compile_options is None:
            return self.model
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            compiled = self.__dict__["_compiled"] = torch.compile(self.model, **self.compile_options)
        return compiled

    @property
    def head(self) -> nn.Module:
        """The output layer of the network (re-initialised or kept trainable by the finetuning options)."""
        head = getattr(self.model, "head", None)
        if not isinstance(head, nn.Module):
            raise AttributeError(f"{type(self.model).__name__} has no `head` module; reinit_head and "
                                 "freeze_backbone need one")
        return head

    def forward(self, inputs: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        return self.network(inputs, lengths=lengths)

    # -- pretrained weights ----------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        if self.hparams.init_from and self.init_report is None:
            self.init_report = self.load_pretrained(self.hparams.init_from)

    def load_pretrained(self, path: str) -> LoadReport:
        """Load `path` into the network as `init_strict` / `reinit_head` say; logs and returns the report."""
        skip = frozenset(f"head.{k}" for k in self.head.state_dict()) if self.hparams.reinit_head else frozenset()
        state, provenance = read_weights(path)
        report = load_weights(self.model, state, strict=self.hparams.init_strict, skip=skip, source=f"init_from={path}")
        if report.clean:  # a partial load was already shown as a warning by `load_weights`
            log.info("init_from %s:\n%s", path, report)
        head = f"; head re-initialised ({', '.join(report.skipped)})" if report.skipped else ""
        rank_zero_info(f"init_from {path}: loaded {len(report.loaded)} of {len(self.model.state_dict())} tensors"
                       f"{head}")
        self.model.provenance = provenance_record("init_from", init_from=(path, provenance))
        return report

    # -- optimisation ----------------------------------------------------------------------------
    def configure_optimizers(self):
        hp = self.hparams
        optimizer = torch.optim.AdamW(param_groups(self.model, self.peak_lr, hp.weight_decay), lr=self.peak_lr,
                                      betas=hp.betas)
        # this run's whole length (max_steps, or max_epochs of batches); a resumed run plans anew
        total = self.schedule_steps = int(self.trainer.estimated_stepping_batches)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, total, hp.warmup_steps, hp.min_lr_ratio))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def on_train_start(self) -> None:
        self.apply_optimizer_settings()

    def apply_optimizer_settings(self) -> None:
        """Set the optimizer and schedule from this task's settings, at the schedule's current step.

        A resumed run gets the checkpoint's optimizer groups (lr, weight decay, betas) and schedule step;
        this replaces their settings with the current ones, so a resume with a new `lr`, `weight_decay`,
        `betas`, `warmup_steps`, `min_lr_ratio` or a longer run (`max_steps`, `max_epochs`) continues as a
        run started with those settings would from this step (the moments and the step count are kept).
        In a fresh run it changes nothing.
        """
        hp = self.hparams
        optimizer = self.trainer.optimizers[0]
        schedule = self.trainer.lr_scheduler_configs[0].scheduler
        wanted = param_groups(self.model, self.peak_lr, hp.weight_decay)
        if [[id(p) for p in g["params"]] for g in optimizer.param_groups] != [[id(p) for p in g["params"]]
                                                                            for g in wanted]:
            raise ConfigError(f"{type(self).__name__}: the checkpoint's optimizer groups differ from those these "
                              f"settings give (weight_decay={hp.weight_decay}); resume with the run's weight_decay")
        before = [(g["initial_lr"], g["weight_decay"], tuple(g["betas"])) for g in optimizer.param_groups]
        for group, want in zip(optimizer.param_groups, wanted):
            group.update(initial_lr=want["lr"], weight_decay=want["weight_decay"], betas=tuple(hp.betas))
        schedule.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        step = schedule.last_epoch
        for group, factor in zip(optimizer.param_groups, schedule.lr_lambdas):
            group["lr"] = group["initial_lr"] * factor(step)
        schedule._last_lr = [g["lr"] for g in optimizer.param_groups]
        after = [(g["initial_lr"], g["weight_decay"], tuple(g["betas"])) for g in optimizer.param_groups]
        if self._resumed_step is not None and (before != after or self._planned_steps != self.schedule_steps):
            rank_zero_info(
                f"Resumed at step {step} with this run's optimizer settings: peak lr {self.peak_lr} "
                f"(the checkpoint's: {max(b[0] for b in before):g}), weight_decay {hp.weight_decay}, "
                f"betas {tuple(hp.betas)}, "
                f"a schedule over {self.schedule_steps} steps"
                + (f" (the checkpoint's run planned {self._planned_steps})." if self._planned_steps else "."))

    # -- steps -------------------------------------------------------------------------------------
    def _run_split(self, batch: dict[str, torch.Tensor], split: str, batch_idx: int) -> torch.Tensor:
        result = self.evaluate(batch, split, batch_idx)
        loss_metric = self.metrics[f"{split}_loss"]
        metric = self.metrics[f"{split}_{self.metric_name}"]
        loss_metric.update(result.loss.detach(), result.loss_weight)
        metric.update(result.metric, result.metric_weight)
        on_step = split == "train"
        self.log(f"{split}_loss", loss_metric, on_step=False, on_epoch=True, prog_bar=True)
        self.log(f"{split}_{self.metric_name}", metric, on_step=False, on_epoch=True, prog_bar=split != "train")
        if on_step:
            self.log("loss", result.loss.detach(), on_step=True, on_epoch=False, prog_bar=True, logger=False)
            # the largest group lr is the untagged parameters' (tagged SSM groups run at a fraction of it)
            lr = max(group["lr"] for group in self.trainer.optimizers[0].param_groups)
            self.log("lr", lr, on_step=True, on_epoch=False)
        return result.loss

    def on_train_epoch_start(self) -> None:
        # Lightning calls this only when an epoch starts from its first batch, never when it resumes one
        # mid-epoch, whose running averages come from the checkpoint. A checkpoint written at the end of an
        # epoch holds that epoch's sums: clear them, or the next epoch's averages would include them.
        for split_metric, metric in self.metrics.items():
            if split_metric.startswith("train_"):
                metric.reset()

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self._rng_to_restore is not None:
            # resumed: continue the interrupted run's random stream (dropout, masking) exactly
            torch.set_rng_state(self._rng_to_restore)
            self._rng_to_restore = None
        loss = self._run_split(batch, "train", batch_idx)
        self.stop_if_not_finite(loss, batch_idx)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._run_split(batch, "val", batch_idx)

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._run_split(batch, "test", batch_idx)

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self(batch["inputs"], batch.get("lengths"))

    def stop_if_not_finite(self, loss: torch.Tensor, batch_idx: int) -> None:
        """Raise NonFiniteLossError (on every rank) when the loss is NaN or inf, before any weight update."""
        if self.trainer.strategy.reduce_boolean_decision(not bool(torch.isfinite(loss)), all=False):
            self._stop_not_finite(f"non-finite training loss ({loss.item()})", batch_idx)

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # A finite loss can still give non-finite gradients; one such update ruins the weights, and every
        # checkpoint written after it. fp16 training with a GradScaler is exempt: the scaler skips those steps.
        if getattr(self.trainer.precision_plugin, "scaler", None) is not None:
            return
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        finite = not grads or bool(torch.isfinite(torch.nn.utils.get_total_norm(grads, norm_type=math.inf)))
        if self.trainer.strategy.reduce_boolean_decision(not finite, all=False):
            name = next((n for n, p in self.named_parameters()
                         if p.grad is not None and not torch.isfinite(p.grad).all()), "a parameter on another rank")
            self._stop_not_finite(f"non-finite gradient of {name}", self.trainer.fit_loop.epoch_loop.batch_idx)

    def _stop_not_finite(self, what: str, batch_idx: int) -> None:
        raise NonFiniteLossError(
            f"{what} at global step {self.global_step} (epoch {self.current_epoch}, batch {batch_idx}); training "
            f"stopped before this step's update. {self.last_good_checkpoint()}")

    def last_good_checkpoint(self) -> str:
        """What to resume after a non-finite step, for the error message: the newest checkpoint from before the
        current step (TaskCheckpoint's last.ckpt) and how to go on, or that there is none and what to change."""
        callback = self.trainer.checkpoint_callback
        last_good = getattr(callback, "last_good", None)
        good = last_good(self.trainer) if last_good is not None else None
        change = "Lower model.init_args.lr or set trainer.gradient_clip_val"
        if good is not None:
            return (f"Last good checkpoint: {good[0]} (global step {good[1]}). {change}, then resume from it with "
                    "--ckpt_path.")
        best = getattr(callback, "best_model_path", "")
        also = f"; the best one is {best}" if best else ""
        if self.trainer.ckpt_path and self._resumed_step == self.global_step:
            return (f"Last good checkpoint: none: this run resumed from {self.trainer.ckpt_path} at this very step, so "
                    f"that checkpoint gives these non-finite values again{also}. {change}, and resume from an earlier "
                    "checkpoint with --ckpt_path or start the run again.")
        resume = f" (or resume from {best} with --ckpt_path)" if best else ""
        return (f"No good checkpoint: this run saved none from before this step{also}. {change}, or check the data "
                f"for NaN or inf values; then start the run again{resume}.")

    # -- checkpoints -------------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_TASK] = type(self).__name__
        # the network's own config, so `seqssm.models.loading` rebuilds it without this task or Lightning
        checkpoint[CHECKPOINT_MODEL_CONFIG] = self.model.config.to_dict()
        checkpoint["seqssm_rng_state"] = torch.get_rng_state()
        checkpoint["seqssm_schedule_steps"] = self.schedule_steps
        # the lineage of init_from (and its surgery), beside hyper_parameters["init_from"]; survives resumes
        checkpoint[CHECKPOINT_PROVENANCE] = self.model.provenance

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._rng_to_restore = checkpoint.get("seqssm_rng_state")
        self._resumed_step = checkpoint.get("global_step")
        self._planned_steps = checkpoint.get("seqssm_schedule_steps")
        if checkpoint.get(CHECKPOINT_PROVENANCE):
            self.model.provenance = checkpoint[CHECKPOINT_PROVENANCE]
