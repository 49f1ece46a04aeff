"""`TaskCheckpoint`: the best checkpoint by the task's own validation metric, and an always current `last.ckpt`.

`last.ckpt` is what `--ckpt_path last` resumes and what `seqssm export` reads, so it must hold the run's
newest state whatever happens:
- it is written at the end of every epoch and of training (Lightning 2.6 refreshes it only when a new
  best was saved, so a run whose metric stopped improving kept an early `last.ckpt`), every
  `last_every_n_minutes` (default 10) and every `last_every_n_train_steps` during an epoch, and on
  SIGINT / SIGTERM, after which training stops with `TrainingInterrupted`;
- it is always `<dirpath>/last.ckpt`: a resumed run keeps writing it, also when the run folder was moved or
  copied (Lightning would write `last-v1.ckpt` beside a stale `last.ckpt`);
- every checkpoint file is written under a temporary name and renamed into place (`AtomicCheckpointIO`),
  so a kill while writing leaves the previous file loadable;
- during training the generation before it is kept as a hidden hard link (no copy), so that when a step's
  loss or gradients are not finite the guard can name, and put back as `last.ckpt`, a state from before
  that step: the state at that step gives the same non-finite values again when resumed exactly. When
  there is none (a non-finite value at the first steps), the `last.ckpt` this run wrote at the failing step
  is removed: it cannot be resumed, and `--ckpt_path last` must not pick it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_warn

from seqssm.errors import CheckpointError, TrainingInterrupted
from seqssm.files import remove_stale_temporaries, temporary_path
from seqssm.models.reading import weights_mismatch
from seqssm.models.safe_load import load_torch_file

from .base import SequenceTask
from .files import AtomicCheckpointIO

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TaskCheckpoint(ModelCheckpoint):
    """ModelCheckpoint with `save_last=True` whose monitor defaults to the task's `val_<metric>`.

    Classification and MaskedLM keep the highest `val_acc`, NextTokenPrediction the lowest
    `val_ppl`; the best is chosen after each validation. See the module docstring for `last.ckpt`.
    """

    def __init__(self, last_every_n_train_steps: int = 0, last_every_n_minutes: float = 10.0,
                 save_last: bool = True, monitor: str | None = None, **kwargs: Any):
        """The checkpoint settings (--checkpoint.* on the command line, `checkpoint:` in a recipe).

        Args:
            last_every_n_train_steps: also refresh last.ckpt every n optimizer steps (0: off).
            last_every_n_minutes: also refresh last.ckpt when this many minutes passed since it was last
                written (0: off), so that a long epoch never risks more than this much work.
            save_last: write <dirpath>/last.ckpt, the run's newest state, which --ckpt_path last resumes.
            monitor: the logged metric that picks the best checkpoint. null (default): the task's own, with its
                mode: val_acc, highest, for Classification and MaskedLM; val_ppl, lowest, for
                NextTokenPrediction. Naming another metric, set --checkpoint.mode too (default min).
            kwargs: as ModelCheckpoint.
        """
        if last_every_n_train_steps < 0:
            raise ValueError(f"checkpoint.last_every_n_train_steps must be >= 0, got {last_every_n_train_steps}")
        if not last_every_n_minutes >= 0:
            raise ValueError(f"checkpoint.last_every_n_minutes must be >= 0 (0: off), got {last_every_n_minutes}")
        super().__init__(save_last=save_last, monitor=monitor, **kwargs)
        self.last_every_n_train_steps = last_every_n_train_steps
        self.last_every_n_minutes = last_every_n_minutes
        self.last_saved_step: int | None = None  # global step of the state in last.ckpt, when known
        self.previous_saved_step: int | None = None  # and of the generation before it (previous_path)
        self._last_written_at = 0.0
        self._writes = 0  # of last.ckpt
        self._stop_signal: int | None = None
        self._previous_handlers: dict[int, Any] = {}
        self._resumes_here = True  # whether the checkpoint being resumed lies in dirpath (set on loading it)
        self.resume_path: str | None = None  # the checkpoint a fit resumes, set by the CLI before setup

    @property
    def last_path(self) -> str:
        return os.path.join(self.dirpath, self.CHECKPOINT_NAME_LAST + self.FILE_EXTENSION)

    @property
    def previous_path(self) -> str:
        return os.path.join(self.dirpath, f".{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}.previous")

    # -- setup -----------------------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.monitor is None and isinstance(pl_module, SequenceTask):
            self.monitor = f"val_{pl_module.metric_name}"
            self.mode = pl_module.monitor_mode
            self.kth_value = torch.tensor(-torch.inf if self.mode == "max" else torch.inf)
            if self.filename is None:
                self.filename = "{epoch}-{step}-{" + self.monitor + ":.4f}"
        super().setup(trainer, pl_module, stage)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()  # also reads --ckpt_path, so in every stage
        if stage == "fit":
            if trainer.is_global_zero:
                remove_stale_temporaries(self.dirpath)
                self._remove_previous()

    def _ModelCheckpoint__warn_if_dir_not_empty(self, dirpath) -> None:
        # ModelCheckpoint.setup warns of a non-empty dirpath; a run resumed in its own folder finds its files there
        # (trainer.ckpt_path is set only after setup, hence resume_path)
        if self.resume_path and os.path.realpath(os.path.dirname(self.resume_path)) == os.path.realpath(dirpath):
            return
        super()._ModelCheckpoint__warn_if_dir_not_empty(dirpath)

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if trainer.ckpt_path and os.path.realpath(trainer.ckpt_path) == os.path.realpath(self.last_path):
            self.last_saved_step = checkpoint.get("global_step")
        self._resumes_here = bool(trainer.ckpt_path) and (
            os.path.realpath(os.path.dirname(trainer.ckpt_path)) == os.path.realpath(self.dirpath))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        old = state_dict.get("dirpath")
        moved = old and self.dirpath and os.path.normpath(old) != os.path.normpath(self.dirpath)
        if moved and self._resumes_here:
            # the run folder was moved or copied: its checkpoints are here now, under the same names (a checkpoint
            # resumed into another folder, a new version, keeps Lightning's handling: only best_model_path)
            state_dict = relocate(state_dict, old, self.dirpath)
        super().load_state_dict(state_dict)

    # -- last.ckpt -------------------------------------------------------------------------------------
    def save_last_now(self, trainer: L.Trainer) -> str:
        """Write the current training state to `<dirpath>/last.ckpt` (atomically); returns its path."""
        path = self.last_path
        if self.last_saved_step != trainer.global_step:  # rewriting the same step keeps the older generation
            # a second name only works when the new file replaces the old one instead of writing into it
            atomic = isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
            kept = atomic and (self._keep_as_previous(path) if trainer.is_global_zero else True)  # rank 0 writes
            self.previous_saved_step = self.last_saved_step if kept else None
        self.last_model_path = path  # part of the state being saved
        trainer.save_checkpoint(path, weights_only=self.save_weights_only)
        self._writes += 1
        self.last_saved_step = trainer.global_step
        self._last_written_at = time.monotonic()
        return path

    def _keeps_last(self, trainer: L.Trainer) -> bool:
        """Whether this run refreshes last.ckpt: save_last, and not a fast_dev_run (which saves no checkpoint)."""
        return bool(self.save_last) and not trainer.fast_dev_run

    def _keep_as_previous(self, path: str) -> bool:
        """Give last.ckpt a second name, previous_path (no copy: no extra space until last.ckpt is replaced)."""
        link = temporary_path(Path(self.previous_path))
        try:
            os.link(path, link)
            os.replace(link, self.previous_path)
            return True
        except OSError:  # no last.ckpt yet, or a filesystem without hard links
            link.unlink(missing_ok=True)
            self._remove_previous()
            return False

    def _remove_previous(self) -> None:
        Path(self.previous_path).unlink(missing_ok=True)

    def last_good(self, trainer: L.Trainer) -> tuple[str, int] | None:
        """(path, global step) of the newest last.ckpt from before the current step, or None.

        When last.ckpt holds this very step, whose loss or gradients turned out not finite, the generation
        before it is put back as last.ckpt, so that `--ckpt_path last` (with, say, a lower lr) can work; when
        there is no generation before it, last.ckpt is removed (see the module docstring).
        """
        if self.last_saved_step is not None and self.last_saved_step < trainer.global_step:
            return self.last_path, self.last_saved_step
        if self.previous_saved_step is None or self.previous_saved_step >= trainer.global_step:
            if self._writes and self.last_saved_step == trainer.global_step:  # this run wrote the failing state
                if trainer.is_global_zero:
                    Path(self.last_path).unlink(missing_ok=True)
                self.last_saved_step = None
            return None
        if trainer.is_global_zero:
            if not os.path.isfile(self.previous_path):
                return None
            os.replace(self.previous_path, self.last_path)
        self.last_saved_step, self.previous_saved_step = self.previous_saved_step, None
        return self.last_path, self.last_saved_step

    def _save_last_checkpoint(self, trainer: L.Trainer, monitor_candidates: dict[str, torch.Tensor]) -> None:
        # Lightning's own calls (after a new best): always last.ckpt, never a versioned last-v1.ckpt
        if self.save_last:
            self.save_last_now(trainer)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._last_written_at = time.monotonic()
        self._install_signal_handlers(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        super().on_train_batch_end(trainer, pl_module, *args)
        if trainer.sanity_checking or not self._keeps_last(trainer):
            return
        minutes = self.last_every_n_minutes
        late = bool(minutes) and time.monotonic() - self._last_written_at >= 60 * minutes
        # one collective per step: a signal or a clock on any rank makes all ranks take part in the save
        flags = torch.tensor([self._stop_signal is not None, late], dtype=torch.float32, device=pl_module.device)
        stop, late = (bool(flag) for flag in trainer.strategy.reduce(flags, reduce_op="max"))
        n = self.last_every_n_train_steps
        if stop or late or (n and trainer.global_step % n == 0):
            self.save_last_now(trainer)
        if stop:
            self._stop(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        writes = self._writes
        super().on_train_epoch_end(trainer, pl_module)  # writes last.ckpt too when it saved a new best
        # after validation and the best checkpoint, so that last.ckpt carries both; also when the run stops at
        # max_steps inside an epoch (see resume.settle_loop_state for how that checkpoint is resumed)
        if self._keeps_last(trainer) and self._writes == writes:
            self.save_last_now(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._keeps_last(trainer) and self.last_saved_step != trainer.global_step:
            self.save_last_now(trainer)
        if trainer.is_global_zero:
            self._remove_previous()  # only needed while training
        self._restore_signal_handlers()
        if self._stop_signal is not None:
            # the signal came during the last validation: the run finished and is saved; still stop the caller
            self._stop(trainer)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore_signal_handlers()
        super().on_exception(trainer, pl_module, exception)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore_signal_handlers()
        super().teardown(trainer, pl_module, stage)

    # -- SIGINT / SIGTERM ------------------------------------------------------------------------------
    def _install_signal_handlers(self, trainer: L.Trainer) -> None:
        self._stop_signal = None
        if not self._keeps_last(trainer) or threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        verbose = trainer.is_global_zero

        def request_stop(signum: int, frame: Any) -> None:
            if self._stop_signal is None and verbose:
                print(f"\nseqssm: {signal.Signals(signum).name} received: saving {self.last_path} after this "
                      "training step, then stopping (Ctrl-C again stops at once, without saving)",
                      file=sys.stderr, flush=True)
            self._stop_signal = signum
            # a second Ctrl-C is for a user who cannot wait (e.g. a long validation): Python's default
            signal.signal(signal.SIGINT, signal.default_int_handler)

        for signum in STOP_SIGNALS:
            self._previous_handlers[signum] = signal.signal(signum, request_stop)

    def _restore_signal_handlers(self) -> None:
        while self._previous_handlers:
            signum, handler = self._previous_handlers.popitem()
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    def _stop(self, trainer: L.Trainer) -> None:
        signum, self._stop_signal = self._stop_signal, None
        self._restore_signal_handlers()
        for logger in trainer.loggers:
            logger.save()  # the metrics logged so far, which the logger otherwise flushes every n steps
        raise TrainingInterrupted(signum, self.last_path, trainer.global_step)


def relocate(state: dict[str, Any], old_dir: str, new_dir: str) -> dict[str, Any]:
    """ModelCheckpoint state with every path under `old_dir` moved to `new_dir` (same file names)."""

    def move(path: Any) -> Any:
        if isinstance(path, str) and path and os.path.dirname(os.path.normpath(path)) == os.path.normpath(old_dir):
            return os.path.join(new_dir, os.path.basename(path))
        return path

    moved = {key: move(value) for key, value in state.items()}
    moved["dirpath"] = new_dir
    if isinstance(state.get("best_k_models"), dict):
        moved["best_k_models"] = {move(path): score for path, score in state["best_k_models"].items()}
    best = moved.get("best_model_path")
    if best and not os.path.exists(best):
        rank_zero_warn(f"resumed a moved run whose best checkpoint {os.path.basename(best)} is not in {new_dir}")
    return moved


def task_checkpoint_shapes(path: str | Path) -> dict[str, torch.Size]:
    """The shapes of the weights in `path`, a checkpoint that `seqssm fit` wrote, given as --ckpt_path (its tensors
    mapped, not read); any other file (an RL agent, bare weights) raises CheckpointError saying what to give."""
    ckpt = load_torch_file(path, mmap=True)
    ckpt = ckpt if isinstance(ckpt, dict) else {}
    if "pytorch-lightning_version" not in ckpt or not isinstance(ckpt.get("state_dict"), dict):
        kind = ckpt.get("format")
        what = f"its format is {kind!r}" if kind else "it has no entry 'pytorch-lightning_version'"
        raise CheckpointError(f"--ckpt_path {path}: not a checkpoint of `seqssm fit` ({what}): give a .ckpt that "
                              "`seqssm fit` wrote into a run's checkpoints/ folder (an RL agent is played with "
                              "`seqssm rl-eval`; weights alone start a run with --model.init_args.init_from)")
    return {key: value.shape for key, value in ckpt["state_dict"].items() if isinstance(value, torch.Tensor)}


def check_checkpoint_fits(task: L.LightningModule, shapes: dict[str, torch.Size], path: str | Path) -> None:
    """Refuse, naming the tensors that differ, a checkpoint whose weights (`shapes`) do not fit `task`, before
    the run writes anything: Lightning's own refusal comes after the run folder exists, as a long traceback."""
    mismatch = weights_mismatch(task.state_dict(), shapes)
    if mismatch:
        raise CheckpointError(f"--ckpt_path {path}: its weights do not fit the model this config builds ({mismatch}). "
                              "Use the config of the run that wrote it (config.yaml in its version folder), or start "
                              f"a run from its weights with --model.init_args.init_from {path} (init_strict: false "
                              "takes what fits)")
