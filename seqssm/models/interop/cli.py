"""`seqssm convert` and `seqssm generate`: pretrained folders (seqssm, Hugging Face Mamba, mamba_ssm) from a shell.

    seqssm convert state-spaces-mamba-130m/ mamba-130m-hf/ --to hf
    seqssm generate mamba-130m-hf/ --prompt "The state space model" --max-new-tokens 32
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

from ...data.tokenized import TOKENIZER_FILE
from ..config import SequenceModelConfig
from ..hub import check_target, check_writable, staged_folder, write_pretrained
from .mamba import TOKENIZER_FILES

# SequenceModel settings that depend on the task (head, pooling, inputs) rather than the pretrained network
TASK_SETTINGS = ("vocab_size", "d_input", "n_classes", "pooling", "tie_embeddings")


def architecture_overrides(config: SequenceModelConfig) -> dict:
    """The `model_overrides` that make `seqssm fit` build the network of `config` (the task sets head and inputs)."""
    return {k: v for k, v in config.to_dict().items() if k not in TASK_SETTINGS}


def copy_tokenizer(src: str | Path, dst: str | Path) -> list[str]:
    """Copy the tokenizer files of folder `src` into `dst`; returns the names copied."""
    copied = []
    for name in TOKENIZER_FILES:
        if (Path(src) / name).is_file():
            shutil.copyfile(Path(src) / name, Path(dst) / name)
            copied.append(name)
    return copied


def convert_main(argv: list[str]) -> None:
    """`seqssm convert SRC DST --to hf|seqssm`: rewrite a pretrained folder in another format."""
    from ..sequence_model import SequenceModel

    parser = argparse.ArgumentParser(prog="seqssm convert", description=convert_main.__doc__)
    parser.add_argument("src", help="a seqssm, Hugging Face Mamba or mamba_ssm folder")
    parser.add_argument("dst", help="folder to write")
    parser.add_argument("--to", choices=("hf", "seqssm"), required=True, help="format of DST")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the content of a non-empty DST (default: refuse it)")
    ns = parser.parse_args(argv)
    check_target(ns.dst, ns.overwrite)  # before reading SRC
    model = SequenceModel.from_pretrained(ns.src)  # all of SRC is read before anything is written
    check_writable(model, ns.to)
    with staged_folder(ns.dst, ns.overwrite) as stage:
        write_pretrained(model, stage, ns.to)
        copied = copy_tokenizer(ns.src, stage)
    print(f"converted {ns.src} -> {ns.dst} ({ns.to}{', with ' + ', '.join(copied) if copied else ''})")
    print("to finetune it: seqssm fit --model.init_args.init_from", ns.dst, "with model_overrides:",
          json.dumps(architecture_overrides(model.config)))


def _usage_error(message: str):
    """One line on stderr and exit code 2, as argparse reports a bad argument."""
    print(f"seqssm generate: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _prompt_ids(prompt: str) -> list[int]:
    try:
        return [int(t) for t in prompt.replace(",", " ").split()]
    except ValueError:
        _usage_error(f"the folder has no {TOKENIZER_FILE}, so --prompt must be token ids (e.g. \"12 7 301\"), "
                     f"got {prompt!r}")


def generate_main(argv: list[str]) -> None:
    """`seqssm generate PATH --prompt TEXT`: continue a prompt with a pretrained language model."""
    from ...data.tokenized import PretrainedTokenizer
    from ..sequence_model import SequenceModel, check_max_new_tokens, check_temperature, check_top_k

    parser = argparse.ArgumentParser(prog="seqssm generate", description=generate_main.__doc__)
    parser.add_argument("path", help="a seqssm, Hugging Face Mamba or mamba_ssm folder")
    parser.add_argument("--prompt", required=True,
                        help=f"text when the folder has a {TOKENIZER_FILE}, else token ids separated by spaces")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    ns = parser.parse_args(argv)
    try:  # the same checks as SequenceModel.generate, before anything is loaded, naming the options
        check_max_new_tokens(ns.max_new_tokens, "--max-new-tokens")
        check_temperature(ns.temperature, "--temperature")
        check_top_k(ns.top_k, "--top-k")
    except (TypeError, ValueError) as e:
        _usage_error(str(e))
    tokenizer = PretrainedTokenizer(ns.path) if (Path(ns.path) / TOKENIZER_FILE).is_file() else None
    ids = tokenizer.encode(ns.prompt).tolist() if tokenizer else _prompt_ids(ns.prompt)
    if not ids:
        _usage_error("--prompt encodes to no tokens: give at least one")
    model = SequenceModel.from_pretrained(ns.path).eval()
    if not (model.is_lm and model.causal):
        _usage_error(f"{ns.path} holds a {'classifier' if not model.is_lm else 'bidirectional model'}, not a causal "
                     "language model: generate continues prompts with next-token models only")
    outside = sorted({i for i in ids if not 0 <= i < model.vocab_size})
    if outside:
        _usage_error(f"--prompt has token ids outside the model's vocabulary [0, {model.vocab_size}): "
                     f"{', '.join(map(str, outside[:8]))}")
    out = model.generate(torch.tensor([ids]), ns.max_new_tokens, temperature=ns.temperature, top_k=ns.top_k,
                         generator=torch.Generator().manual_seed(ns.seed))[0].tolist()
    print(tokenizer.decode(out) if tokenizer else " ".join(map(str, out)))
