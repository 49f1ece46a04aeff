"""`SeqssmCLI`: the LightningCLI behind `seqssm fit | validate | test | predict`, and `make_cli` to build it.

Here, below both the `seqssm` command and the species study (which runs its stages through it), so
that neither has to import the other.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningCLI

from ..data import SeqDataModule
from .base import ConfigError, SequenceTask
from .checkpoint import TaskCheckpoint
from .logs import CSVLogger
from .recipes import RECIPE_PARSER_MODE, register_recipe_loader
from .resume import ResumableTrainData

LINKED_FROM_DATA = ("vocab_size", "d_input", "n_classes", "mask_token_id", "max_length")


class SeqssmCLI(LightningCLI):
    """LightningCLI with data-to-model dimension links, task-aware checkpoints, safe checkpoint loading and
    recipes that name their base (`seqssm.tasks.recipes`)."""

    def init_parser(self, **kwargs: Any):
        register_recipe_loader()
        kwargs.setdefault("parser_mode", RECIPE_PARSER_MODE)
        return super().init_parser(**kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        for attr in LINKED_FROM_DATA:
            parser.link_arguments(f"data.{attr}", f"model.init_args.{attr}", apply_on="instantiate")
        parser.add_lightning_class_args(TaskCheckpoint, "checkpoint")
        parser.add_argument("--torch_threads", type=Optional[int], default=None,
                            help="CPU threads for torch ops (default: torch's choice). 1 suits small models on "
                                 "a few shared cores, where threads waiting on each other cost more than they gain.")

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        if config.get("weights_only") is False:
            raise ConfigError("weights_only: false is refused: seqssm loads checkpoints with weights_only=True so "
                              "that a checkpoint file cannot run code")
        if self.subcommand:
            config["weights_only"] = True
        if config.get("torch_threads") is not None:
            if config.torch_threads < 1:
                raise ConfigError(f"torch_threads must be >= 1, got {config.torch_threads}")
            torch.set_num_threads(config.torch_threads)
        if config.get("ckpt_path") and config.model.init_args.get("init_from"):
            # the checkpoint's weights replace the pretrained ones anyway; don't require that file to still exist
            config.model.init_args.init_from = None

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        trainer = self._get(self.config_init, "trainer", default={})
        if trainer.get("logger") in (None, True):
            # Lightning's default (CSV, or TensorBoard when installed), as a CSV log that a crash cannot empty
            kwargs["logger"] = CSVLogger(save_dir=trainer.get("default_root_dir") or os.getcwd())
        return super().instantiate_trainer(**kwargs)

    def after_instantiate_classes(self) -> None:
        # a stable folder per run, so that `--ckpt_path last` finds the previous run's last.ckpt
        for callback in self.trainer.checkpoint_callbacks:
            if isinstance(callback, TaskCheckpoint) and callback.dirpath is None:
                callback.dirpath = os.path.join(self.trainer.default_root_dir, "checkpoints")

    def before_fit(self) -> None:
        """Resolve `--ckpt_path last` to a file, and refuse a fit that would overwrite another run's last.ckpt."""
        config = self.config_init[self.subcommand]
        callback = self.trainer.checkpoint_callback
        if not isinstance(callback, TaskCheckpoint) or not callback.save_last:
            return
        folder = Path(callback.dirpath)
        where = f"{folder} (the checkpoints folder of trainer.default_root_dir={self.trainer.default_root_dir})"
        if config.get("ckpt_path") == "last":
            found = sorted(folder.glob("last*.ckpt"), key=lambda p: p.stat().st_mtime)
            if not found:
                raise ConfigError(f"--ckpt_path last: nothing to resume: no last.ckpt in {where}. Check "
                                  "--trainer.default_root_dir (or the --config that sets it), give a checkpoint file "
                                  "with --ckpt_path PATH, or leave out --ckpt_path to start a new run.")
            config["ckpt_path"] = str(found[-1])
        resumes_here = config.get("ckpt_path") and Path(config["ckpt_path"]).resolve().parent == folder.resolve()
        last = folder / "last.ckpt"
        if last.is_file() and not resumes_here:
            raise ConfigError(f"{last} holds the state of an earlier run, which this run would overwrite. Resume "
                              "that run with --ckpt_path last, give this run its own folder with "
                              f"--trainer.default_root_dir, or delete {folder} to start over.")


def make_cli(args=None, run: bool = True) -> SeqssmCLI:
    """The `seqssm` LightningCLI on `args` (default: sys.argv); `run=False` only parses and instantiates."""
    return SeqssmCLI(
        SequenceTask, SeqDataModule, subclass_mode_model=True, subclass_mode_data=True,
        trainer_defaults={"callbacks": [ResumableTrainData()]},
        save_config_kwargs={"overwrite": True}, auto_configure_optimizers=False, args=args, run=run,
        parser_kwargs={"description": "Train and evaluate seqssm models. Also: `seqssm export CKPT OUT_DIR`, "
                                      "`seqssm convert SRC DST --to hf|seqssm`, `seqssm generate PATH --prompt TEXT`."},
    )
