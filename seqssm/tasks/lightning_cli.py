"""`SeqssmCLI`: the LightningCLI behind `seqssm fit | validate | test | predict`, and `make_cli` to build it.

Here, below both the `seqssm` command and the species study (which runs its stages through it), so
that neither has to import the other.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any, Optional

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from seqssm.arguments import ShortErrors
from seqssm.errors import ConfigError, MissingFileError, user_error_in
from seqssm.models.safe_load import checkpoint_error

from ..data import SeqDataModule
from .base import SequenceTask
from .checkpoint import TaskCheckpoint
from .logs import CSVLogger
from seqssm.recipes import RECIPE_PARSER_MODE, register_recipe_loader
from .resume import ResumableTrainData

LINKED_FROM_DATA = ("vocab_size", "d_input", "n_classes", "mask_token_id", "max_length")
# --ckpt_path values that Lightning resolves itself rather than reading as a file name
LIGHTNING_CKPT_NAMES = ("best", "last", "hpc", "registry")


class SeqssmParser(ShortErrors, LightningArgumentParser):
    """LightningCLI's parser, whose mistakes are one UsageError line naming the option (`seqssm.arguments`)."""


class SeqssmCLI(LightningCLI):
    """LightningCLI with data-to-model dimension links, task-aware checkpoints, safe checkpoint loading and
    recipes that name their base (`seqssm.recipes`)."""

    def init_parser(self, **kwargs: Any):
        register_recipe_loader()
        kwargs.setdefault("parser_mode", RECIPE_PARSER_MODE)
        return super().init_parser(**kwargs)

    def _parse_ckpt_path(self) -> None:
        # Lightning reads the hyper-parameters of --ckpt_path here, with torch.load(weights_only=True): name the file
        # and what is wrong with it when that fails, as every other checkpoint read of seqssm does
        try:
            super()._parse_ckpt_path()
        except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as e:
            raise checkpoint_error(self.config[self.config.subcommand].ckpt_path, e) from e

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
        ckpt = config.get("ckpt_path")
        if ckpt and ckpt.split(":")[0] not in LIGHTNING_CKPT_NAMES and "://" not in ckpt and not Path(ckpt).is_file():
            raise MissingFileError(f"--ckpt_path {ckpt}: no such checkpoint file. Give a .ckpt of `seqssm fit` (its "
                                   "<default_root_dir>/checkpoints folder), or --ckpt_path last to resume the run in "
                                   "--trainer.default_root_dir")
        if config.get("torch_threads") is not None:
            if config.torch_threads < 1:
                raise ConfigError(f"torch_threads must be >= 1, got {config.torch_threads}")
            torch.set_num_threads(config.torch_threads)
        if config.get("ckpt_path") and config.model.init_args.get("init_from"):
            # the checkpoint's weights replace the pretrained ones anyway; don't require that file to still exist
            config.model.init_args.init_from = None

    def instantiate_classes(self) -> None:
        # A class refusing a setting raises ValueError / TypeError in __init__ (which jsonargparse wraps in its own),
        # the Trainer a MisconfigurationException: a mistake in the config, named in one line
        try:
            super().instantiate_classes()
        except (ValueError, TypeError, MisconfigurationException) as e:
            if user_error_in(e):  # its own message is the one to show
                raise
            raise ConfigError(setting_error(e)) from e

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


def setting_error(error: BaseException) -> str:
    """"Class: message" for an error raised while building a class from the config: the innermost cause's message,
    after the name of the class that jsonargparse's wrapping reports (if it does)."""
    owner = None
    while error.__cause__ is not None:
        owner = owner or re.search(r"class_path='(?:[\w.]+\.)?(\w+)'", str(error))
        error = error.__cause__
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"{owner[1]}: {message}" if owner else message


def make_cli(args=None, run: bool = True) -> SeqssmCLI:
    """The `seqssm` LightningCLI on `args` (default: sys.argv); `run=False` only parses and instantiates."""
    return SeqssmCLI(
        SequenceTask, SeqDataModule, subclass_mode_model=True, subclass_mode_data=True,
        trainer_defaults={"callbacks": [ResumableTrainData()]},
        save_config_kwargs={"overwrite": True}, auto_configure_optimizers=False, args=args, run=run,
        parser_class=SeqssmParser,
        parser_kwargs={"description": "Train and evaluate seqssm models (`seqssm --help` lists every command)."},
    )
