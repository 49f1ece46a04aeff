"""The `seqssm` command: LightningCLI `fit | validate | test | predict`, plus `export`, `data`, ...

    seqssm fit --config recipes/quickstart.yaml
    seqssm test --config runs/quickstart/lightning_logs/version_0/config.yaml --ckpt_path runs/quickstart/checkpoints/last.ckpt
    seqssm fit --config recipes/quickstart.yaml --ckpt_path last          # resume
    seqssm export runs/quickstart/checkpoints/last.ckpt my-model/         # config.json + model.safetensors
    seqssm convert mamba-130m/ mamba-130m-hf/ --to hf                     # seqssm / HF Mamba / mamba_ssm folders
    seqssm generate mamba-130m-hf/ --prompt "Hello"                       # text with the folder's tokenizer.json
    seqssm study species --preset cpu-small --out runs/species-small      # thesis 16: pretraining stages, surgery, arms
    seqssm reproduce all --seeds 3 --out runs/reproduce                   # the papers' comparisons, with verdicts

The model's input and output sizes (`vocab_size`, `d_input`, `n_classes`) and the `mask_token_id`
come from the DataModule. Checkpoints go to `<default_root_dir>/checkpoints`
(best by the task's validation metric, and `last.ckpt`), so `--ckpt_path last` finds them; `last.ckpt`
is refreshed every 10 minutes and on Ctrl-C / SIGTERM, which then stop the run (exit code 128 + signal).
`export` and `convert` refuse a non-empty output folder unless given `--overwrite`.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from .data.errors import DataFormatError, DataNotFoundError
from .models.hub import NotASeqssmFolderError, OutputExistsError
from .models.interop import PretrainedFormatError
from .models.surgery import SurgeryError
from .study.reproduce.claim import ReproduceError
from .study.species import StudyError
from .tasks import ConfigError, IncompatibleWeightsError, NonFiniteLossError, TrainingInterrupted
from .tasks.lightning_cli import make_cli

# Errors whose message already says what is wrong and what to do: shown without a traceback.
USER_ERRORS = (ConfigError, DataFormatError, DataNotFoundError, IncompatibleWeightsError, NonFiniteLossError,
               NotASeqssmFolderError, OutputExistsError, PretrainedFormatError, ReproduceError, StudyError,
               SurgeryError)


def export_main(argv: list[str]) -> None:
    """`seqssm export CKPT OUT_DIR`: write a checkpoint's model as config.json + model.safetensors."""
    from .models.loading import export_checkpoint

    parser = argparse.ArgumentParser(prog="seqssm export", description=export_main.__doc__)
    parser.add_argument("ckpt", help="Lightning checkpoint of a seqssm task (.ckpt)")
    parser.add_argument("out_dir", help="folder to write; load it with SequenceModel.from_pretrained")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the content of a non-empty OUT_DIR (default: refuse it)")
    ns = parser.parse_args(argv)
    out = export_checkpoint(ns.ckpt, ns.out_dir, overwrite=ns.overwrite)
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
        elif argv[:1] == ["data"]:
            from .data.cli import main as data_main

            data_main(argv[1:])
        elif argv[:1] == ["study"]:
            from .study.cli import main as study_main

            study_main(argv[1:])
        elif argv[:1] == ["reproduce"]:
            from .study.reproduce.cli import main as reproduce_main

            reproduce_main(argv[1:])
        elif argv[:1] in (["rl"], ["rl-eval"]):
            try:
                from .rl.cli import main as rl_main
            except ModuleNotFoundError as e:
                raise SystemExit(f"seqssm {argv[0]} needs the RL extra ({e.name} is missing): pip install 'seqssm[rl]'")

            rl_main(argv)
        else:
            make_cli(args)
    except TrainingInterrupted as e:
        stopped = f"seqssm: training stopped by {e.signal_name} at global step {e.global_step}"
        if argv[:1] == ["fit"]:
            print(f"{stopped}; the run is saved in {e.checkpoint}.\nResume it with: {resume_command(argv)}",
                  file=sys.stderr)
        elif argv[:1] == ["study"]:
            print(f"{stopped}. Run the same command again to go on: finished stages are kept, this one starts over.",
                  file=sys.stderr)
        else:
            print(f"seqssm: {e}", file=sys.stderr)
        sys.exit(128 + e.signum)  # the shell's code for "ended by this signal": `fit && test` must not go on
    except Exception as e:
        # jsonargparse wraps errors raised while instantiating a class in its own ValueError
        cause = user_error(e)
        if cause is None:
            raise
        print(f"seqssm: error: {cause}", file=sys.stderr)
        sys.exit(1)


def resume_command(argv: list[str]) -> str:
    """The `seqssm` command line `argv` with `--ckpt_path last` (replacing any other --ckpt_path)."""
    args, skip = [], False
    for arg in argv:
        if skip or arg.startswith("--ckpt_path="):
            skip = False
            continue
        if arg == "--ckpt_path":
            skip = True
            continue
        args.append(arg)
    return shlex.join(["seqssm", *args, "--ckpt_path", "last"])


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
