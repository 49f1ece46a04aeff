"""`SeqssmCLI`: the LightningCLI behind `seqssm fit | validate | test | predict`, and `make_cli` to build it.

Here, below both the `seqssm` command and the species study (which runs its stages through it), so
that neither has to import the other.

Where `seqssm fit` writes, as Lightning users expect: each new run of a recipe is a new version,
`<default_root_dir>/lightning_logs/version_N/` with its config.yaml, metrics.csv and `checkpoints/` (best by the
task's metric, and last.ckpt), so a second run never touches the first one's files. `--ckpt_path last` resumes
the run whose last.ckpt was written most recently, in its own version folder; any other checkpoint given to
--ckpt_path (a best one) starts a new version from it. While a run writes, its default_root_dir is locked
(`RunFolderLock`): a second `seqssm fit` there is refused. With --checkpoint.dirpath the checkpoints go there, and
a last.ckpt of another run there is not overwritten. A CLI built with `run=False` (the studies) writes its
checkpoints to `<default_root_dir>/checkpoints` and manages its folders itself.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import signal
import sys
import warnings
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Optional

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.rank_zero import rank_zero_module, rank_zero_only

from seqssm.arguments import ShortErrors
from seqssm.errors import ConfigError, MissingFileError, user_error_in
from seqssm.models.safe_load import checkpoint_error

from ..data import SeqDataModule
from ..data.io import size_text
from .base import SequenceTask
from .checkpoint import TaskCheckpoint, check_checkpoint_fits, task_checkpoint_shapes
from .files import RunFolderLock
from .logs import CSVLogger
from seqssm.recipes import RECIPE_PARSER_MODE, register_recipe_loader
from .resume import ResumableTrainData

LINKED_FROM_DATA = ("vocab_size", "d_input", "n_classes", "mask_token_id", "max_length")
# --ckpt_path values that Lightning resolves itself rather than reading as a file name
LIGHTNING_CKPT_NAMES = ("best", "last", "hpc", "registry")
VERSIONS = "lightning_logs"  # <default_root_dir>/lightning_logs/version_N: one run of `seqssm fit` each


class NoLitLoggerTip(logging.Filter):
    """Drops the advertisement for litlogger that Lightning logs each time a Trainer is built."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "try installing [litlogger]" not in record.getMessage()


def version_folder(root: str | Path, version: int) -> Path:
    """The folder of run `version` under `root` (a default_root_dir): config.yaml, metrics.csv, checkpoints/."""
    return Path(root) / VERSIONS / f"version_{version}"


def run_versions(root: str | Path) -> dict[int, Path]:
    """The runs under `root` (a default_root_dir): version number -> its folder."""
    found = {}
    for folder in (Path(root) / VERSIONS).glob("version_*"):
        number = folder.name.partition("_")[2]
        if folder.is_dir() and number.isdigit():
            found[int(number)] = folder
    return found


def newest_last_checkpoint(root: str | Path) -> Path | None:
    """The last.ckpt under `root`'s run versions that was written most recently, or None."""
    found = [f / "checkpoints" / "last.ckpt" for f in run_versions(root).values()]
    found = [p for p in found if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


class SeqssmParser(ShortErrors, LightningArgumentParser):
    """LightningCLI's parser, whose mistakes are one UsageError line naming the option (`seqssm.arguments`)."""


class SeqssmCLI(LightningCLI):
    """LightningCLI with data-to-model dimension links, task-aware checkpoints, safe checkpoint loading, recipes
    that name their base (`seqssm.recipes`), and a locked version folder per fit run (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any):
        # Lightning 2.6's own _pytree helper uses the LeafSpec that torch 2.10 deprecates: a warning on every run
        # that no setting of ours acts on (matched by its message: torch's other deprecations still show). Here,
        # not at import: a caller's warnings.catch_warnings (pytest's) would drop a filter set on import
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                category=FutureWarning)
        # the run-folder locks that before_instantiate_classes takes are held until the run ends, however it ends
        with ExitStack() as self._locks:
            super().__init__(*args, **kwargs)

    def init_parser(self, **kwargs: Any):
        register_recipe_loader()
        kwargs.setdefault("parser_mode", RECIPE_PARSER_MODE)
        # an abbreviation (--trainer.max_epoch for max_epochs) would be taken silently; refused, with the closest
        kwargs.setdefault("allow_abbrev", False)
        return super().init_parser(**kwargs)

    def _parse_ckpt_path(self) -> None:
        self._ckpt_shapes = None
        if self.config.get("subcommand"):
            config = self.config[self.config.subcommand]
            self._resolve_last(config)
            if config.get("ckpt_path") and Path(config.ckpt_path).is_file():
                self._ckpt_shapes = task_checkpoint_shapes(config.ckpt_path)
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
            raise MissingFileError(f"--ckpt_path {ckpt}: no such checkpoint file. Give a .ckpt of `seqssm fit` (in "
                                   f"<default_root_dir>/{VERSIONS}/version_N/checkpoints), or --ckpt_path last for the "
                                   "newest run in --trainer.default_root_dir")
        if self.subcommand == "fit":
            self.lock_run_folders(config)
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
        if not any(isinstance(f, NoLitLoggerTip) for f in rank_zero_module.log.filters):
            rank_zero_module.log.addFilter(NoLitLoggerTip())
        trainer = self._get(self.config_init, "trainer", default={})
        if trainer.get("logger") in (None, True):
            # Lightning's default (CSV, or TensorBoard when installed), as a CSV log that a crash cannot empty
            kwargs["logger"] = CSVLogger(save_dir=trainer.get("default_root_dir") or os.getcwd())
        return super().instantiate_trainer(**kwargs)

    def after_instantiate_classes(self) -> None:
        if self.subcommand is None:
            # built with run=False (the studies): one stable folder per default_root_dir, which they manage
            for callback in self.trainer.checkpoint_callbacks:
                if isinstance(callback, TaskCheckpoint) and callback.dirpath is None:
                    callback.dirpath = os.path.join(self.trainer.default_root_dir, "checkpoints")

    def _resolve_last(self, config) -> None:
        """Replace `--ckpt_path last` by the newest last.ckpt of the runs in default_root_dir (or in
        --checkpoint.dirpath when given), or say where none was found."""
        if config.get("ckpt_path") != "last":
            return
        root = config.trainer.get("default_root_dir") or os.getcwd()
        dirpath = (config.get("checkpoint") or {}).get("dirpath")
        if dirpath:
            found = sorted(Path(dirpath).glob("last*.ckpt"), key=lambda p: p.stat().st_mtime)
            last, where = (found[-1] if found else None), f"{dirpath} (--checkpoint.dirpath)"
        else:
            last = newest_last_checkpoint(root)
            where = (f"{Path(root) / VERSIONS}/version_*/checkpoints (the runs of "
                     f"trainer.default_root_dir={config.trainer.get('default_root_dir')})")
        if last is None:
            raise ConfigError(f"--ckpt_path last: nothing to resume: no last.ckpt in {where}. Check "
                              "--trainer.default_root_dir (or the --config that sets it), give a checkpoint file with "
                              "--ckpt_path PATH, or leave out --ckpt_path to start a new run.")
        config["ckpt_path"] = str(last)

    def _run_subcommand(self, subcommand: str) -> None:
        if self._ckpt_shapes is not None:
            check_checkpoint_fits(self.model, self._ckpt_shapes, self.config_init[subcommand].ckpt_path)
        if isinstance(self.datamodule, SeqDataModule):
            # Lightning's logger makes its version folder before it sets the data up: missing data must fail
            # first, so that a failed start leaves no empty version_N behind (setup keeps the splits it builds)
            self.datamodule.setup(subcommand)
        self.place_run()
        self.warn_if_untrained(subcommand)
        try:
            super()._run_subcommand(subcommand)
        except SystemExit as e:
            if not isinstance(e.__context__, KeyboardInterrupt):
                raise
            self.stopped_at_once(subcommand)
        except (MemoryError, RuntimeError) as e:
            hint = out_of_memory(e, subcommand, getattr(self.datamodule, "batch_size", None))
            if hint is None:
                raise
            raise ConfigError(hint) from e
        if subcommand == "fit":
            self.say_if_already_done()

    def warn_if_untrained(self, subcommand: str) -> None:
        """One line on stderr when validate / test / predict would evaluate freshly initialised weights."""
        if subcommand == "fit" or rank_zero_only.rank != 0 or self.config_init[subcommand].get("ckpt_path"):
            return
        if getattr(self.model, "hparams", {}).get("init_from"):
            return
        print(f"seqssm {subcommand}: warning: no --ckpt_path and no init_from: evaluating randomly initialised "
              f"weights; give --ckpt_path CKPT (a .ckpt of `seqssm fit`) or --model.init_args.init_from PATH",
              file=sys.stderr)

    def say_if_already_done(self) -> None:
        """After a resumed fit that trained no step: one line saying which limit the checkpoint had already
        reached and what to change (Lightning says only that it stopped)."""
        trainer, resumed = self.trainer, getattr(self.model, "_resumed_step", None)
        if rank_zero_only.rank != 0 or resumed is None or trainer.global_step != resumed:
            return
        if trainer.max_steps not in (None, -1) and trainer.global_step >= trainer.max_steps:
            limit, option = f"max_steps={trainer.max_steps}", "--trainer.max_steps"
        elif trainer.max_epochs not in (None, -1) and trainer.current_epoch >= trainer.max_epochs:
            limit, option = f"max_epochs={trainer.max_epochs}", "--trainer.max_epochs"
        else:
            return
        print(f"seqssm fit: nothing trained: {trainer.ckpt_path} had already reached {limit} (global step "
              f"{trainer.global_step}, epoch {trainer.current_epoch}); raise {option} to train on, or leave out "
              "--ckpt_path to start a new run", file=sys.stderr)

    def stopped_at_once(self, subcommand: str) -> None:
        """After Lightning's answer to a KeyboardInterrupt (a second Ctrl-C during fit, or one during validate /
        test / predict): its exit status 1 would read as a failure, so exit as a command ended by SIGINT (130), as
        the first Ctrl-C of a fit does, saying what is kept. Lightning ignores SIGINT from then on; a caller in this
        process gets it back."""
        signal.signal(signal.SIGINT, signal.default_int_handler)
        message = f"seqssm {subcommand}: stopped by Ctrl-C (SIGINT)"
        callback = self.trainer.checkpoint_callback
        if subcommand == "fit" and isinstance(callback, TaskCheckpoint):
            last = Path(callback.last_path)
            step = f" (global step {callback.last_saved_step})" if callback.last_saved_step is not None else ""
            kept = f"{last}{step} is intact: resume it with --ckpt_path last" if last.is_file() else "nothing was saved"
            message = f"seqssm fit: stopped at once by Ctrl-C (SIGINT), without saving the step in flight; {kept}"
        print(message, file=sys.stderr)
        sys.exit(128 + signal.SIGINT)

    def lock_run_folders(self, config) -> None:
        """Lock default_root_dir (and --checkpoint.dirpath when given) until this CLI is done; before the Trainer is
        built, so that a refusal is the only line printed. The other processes of a DDP run write nothing of
        their own and lock nothing."""
        if rank_zero_only.rank != 0 or os.environ.get("NODE_RANK", "0") != "0":
            return
        folders = {Path(config.trainer.get("default_root_dir") or os.getcwd())}
        if (config.get("checkpoint") or {}).get("dirpath"):
            folders.add(Path(config.checkpoint.dirpath))
        for folder in sorted(folders):
            self._locks.enter_context(RunFolderLock(folder))

    def place_run(self) -> None:
        """Give a fit its folder: the version folder of the run whose last.ckpt --ckpt_path resumes, else a new
        version (checkpoints and the default logger's files both); with --checkpoint.dirpath, refuse to overwrite
        another run's last.ckpt there. validate / test / predict read the checkpoints of the run they evaluate."""
        callback = self.trainer.checkpoint_callback
        if not isinstance(callback, TaskCheckpoint):
            return
        ckpt = self.config_init[self.subcommand].get("ckpt_path")
        if self.subcommand != "fit":
            if callback.dirpath is None and ckpt and Path(ckpt).is_file():
                callback.dirpath = str(Path(ckpt).parent)
            return
        callback.resume_path = ckpt
        root = Path(self.trainer.default_root_dir)
        if callback.dirpath is None:
            versions = run_versions(root)
            # a run's last.ckpt goes on in its folder; any other checkpoint (a best one) starts a new version from it
            resumed = [n for n, folder in versions.items()
                       if ckpt and Path(ckpt).resolve() == (folder / "checkpoints" / "last.ckpt").resolve()]
            version = resumed[0] if resumed else max(versions, default=-1) + 1
            callback.dirpath = str(version_folder(root, version) / "checkpoints")
            for logger in self.trainer.loggers:
                # Lightning's CSV and TensorBoard loggers in <root>/lightning_logs: the same version folder (not
                # fast_dev_run's DummyLogger, which has no folder)
                folder = getattr(logger, "root_dir", None)
                if hasattr(logger, "_version") and folder and Path(folder) == root / VERSIONS:
                    logger._version = version
            return
        folder = Path(callback.dirpath)
        last = folder / "last.ckpt"
        resumes_here = ckpt and Path(ckpt).resolve().parent == folder.resolve()
        if callback.save_last and last.is_file() and not resumes_here:
            raise ConfigError(f"{last} holds the state of an earlier run, which this run would overwrite. Resume "
                              "that run with --ckpt_path last, give this run its own folder with "
                              f"--checkpoint.dirpath, or delete {folder} to start over.")


def out_of_memory(error: BaseException, subcommand: str, batch_size: int | None) -> str | None:
    """One line for an allocator's failure during `seqssm SUBCOMMAND` (torch's CPU allocator's RuntimeError, CUDA's
    OutOfMemoryError, a MemoryError) naming the amount and batch_size, the setting to lower; None for other errors."""
    text = str(error)
    if not isinstance(error, (MemoryError, torch.OutOfMemoryError)) and "can't allocate memory" not in text:
        return None
    asked = re.search(r"tried to allocate (\d+) bytes|Tried to allocate ([\d.]+ [KMGTP]iB)", text)
    amount = "" if asked is None else f" {size_text(int(asked[1])) if asked[1] else asked[2]}"
    where = "on the GPU" if isinstance(error, torch.OutOfMemoryError) else "in memory"
    if not batch_size:
        now = ""
    elif subcommand == "fit" and batch_size > 1:
        now = f" (now {batch_size}; e.g. {batch_size // 2}, with --trainer.accumulate_grad_batches doubled to keep " \
              "the effective batch)"
    else:
        now = f" (now {batch_size})"
    return (f"out of memory: a step of seqssm {subcommand} asked for{amount} {where}, more than was free; lower "
            f"--data.init_args.batch_size{now}, or max_length or the model's size. The checkpoints written so far "
            "are kept")


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
    with warnings.catch_warnings():
        if args is not None:
            # The arguments are given on purpose (the `seqssm` command's, or a study's config): Lightning warns
            # whenever sys.argv holds any of its own as well.
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
        return SeqssmCLI(
            SequenceTask, SeqDataModule, subclass_mode_model=True, subclass_mode_data=True,
            trainer_defaults={"callbacks": [ResumableTrainData()]},
            save_config_kwargs={"overwrite": True}, auto_configure_optimizers=False, args=args, run=run,
            parser_class=SeqssmParser,
            parser_kwargs={"description": "Train and evaluate seqssm models (`seqssm --help` lists every command)."},
        )
