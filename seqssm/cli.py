"""The `seqssm` command: LightningCLI `fit | validate | test | predict`, plus `export`.

    seqssm fit --config recipes/quickstart.yaml
    seqssm test --config runs/quickstart/lightning_logs/version_0/config.yaml --ckpt_path runs/quickstart/checkpoints/last.ckpt
    seqssm fit --config recipes/quickstart.yaml --ckpt_path last          # resume
    seqssm export runs/quickstart/checkpoints/last.ckpt my-model/         # config.json + model.safetensors
    seqssm convert mamba-130m/ mamba-130m-hf/ --to hf                     # seqssm / HF Mamba / mamba_ssm folders
    seqssm generate mamba-130m-hf/ --prompt "Hello"                       # text with the folder's tokenizer.json
    seqssm study species --preset cpu-small --out runs/species-small      # thesis 16: pretraining stages, surgery, arms

The model's input and output sizes (`vocab_size`, `d_input`, `n_classes`) and the `mask_token_id`
come from the DataModule. Checkpoints go to `<default_root_dir>/checkpoints`
(best by the task's validation metric, and `last.ckpt`), so `--ckpt_path last` finds them.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

import torch
from lightning.pytorch.cli import LightningCLI

from .data import SeqDataModule
from .data.errors import DataFormatError, DataNotFoundError
from .models.hub import NotASeqssmFolderError
from .models.interop import PretrainedFormatError
from .models.surgery import SurgeryError
from .study.species import StudyError
from .tasks import ConfigError, IncompatibleWeightsError, NonFiniteLossError, SequenceTask
from .tasks.checkpoint import TaskCheckpoint
from .tasks.resume import ResumableTrainData

LINKED_FROM_DATA = ("vocab_size", "d_input", "n_classes", "mask_token_id")
# Errors whose message already says what is wrong and what to do: shown without a traceback.
USER_ERRORS = (ConfigError, DataFormatError, DataNotFoundError, IncompatibleWeightsError, NonFiniteLossError,
               NotASeqssmFolderError, PretrainedFormatError, StudyError, SurgeryError)


class SeqssmCLI(LightningCLI):
    """LightningCLI with data-to-model dimension links, task-aware checkpoints and safe checkpoint loading."""

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

    def after_instantiate_classes(self) -> None:
        # a stable folder per run, so that `--ckpt_path last` finds the previous run's last.ckpt
        for callback in self.trainer.checkpoint_callbacks:
            if isinstance(callback, TaskCheckpoint) and callback.dirpath is None:
                callback.dirpath = os.path.join(self.trainer.default_root_dir, "checkpoints")


def make_cli(args=None, run: bool = True) -> SeqssmCLI:
    """The `seqssm` LightningCLI on `args` (default: sys.argv); `run=False` only parses and instantiates."""
    return SeqssmCLI(
        SequenceTask, SeqDataModule, subclass_mode_model=True, subclass_mode_data=True,
        trainer_defaults={"callbacks": [ResumableTrainData()]},
        save_config_kwargs={"overwrite": True}, auto_configure_optimizers=False, args=args, run=run,
        parser_kwargs={"description": "Train and evaluate seqssm models. Also: `seqssm export CKPT OUT_DIR`, "
                                      "`seqssm convert SRC DST --to hf|seqssm`, `seqssm generate PATH --prompt TEXT`."},
    )


def export_main(argv: list[str]) -> None:
    """`seqssm export CKPT OUT_DIR`: write a checkpoint's model as config.json + model.safetensors."""
    from .tasks.export import export_checkpoint

    parser = argparse.ArgumentParser(prog="seqssm export", description=export_main.__doc__)
    parser.add_argument("ckpt", help="Lightning checkpoint of a seqssm task (.ckpt)")
    parser.add_argument("out_dir", help="folder to write; load it with seqssm.models.hub.load_pretrained")
    ns = parser.parse_args(argv)
    out = export_checkpoint(ns.ckpt, ns.out_dir)
    print(f"exported {ns.ckpt} -> {out}/config.json, {out}/model.safetensors")


def main(args: list[str] | None = None) -> None:
    """Entry point of the `seqssm` console script."""
    argv = sys.argv[1:] if args is None else list(args)
    try:
        if argv[:1] == ["export"]:
            export_main(argv[1:])
        elif argv[:1] == ["convert"]:
            from .models.interop.cli import convert_main

            convert_main(argv[1:])
        elif argv[:1] == ["generate"]:
            from .models.interop.cli import generate_main

            generate_main(argv[1:])
        elif argv[:1] == ["study"]:
            from .study.cli import main as study_main

            study_main(argv[1:])
        elif argv[:1] in (["rl"], ["rl-eval"]):
            try:
                from .rl.cli import main as rl_main
            except ModuleNotFoundError as e:
                raise SystemExit(f"seqssm {argv[0]} needs the RL extra ({e.name} is missing): pip install 'seqssm[rl]'")

            rl_main(argv)
        else:
            make_cli(args)
    except Exception as e:
        # jsonargparse wraps errors raised while instantiating a class in its own ValueError
        cause = user_error(e)
        if cause is None:
            raise
        print(f"seqssm: error: {cause}", file=sys.stderr)
        sys.exit(1)


def user_error(error: BaseException) -> BaseException | None:
    """The first of USER_ERRORS in `error`'s chain of causes, or None if it holds none."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, USER_ERRORS):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


if __name__ == "__main__":
    main()
