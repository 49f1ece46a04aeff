"""The `seqssm` command: one table of subcommands (`COMMANDS`), listed by `seqssm --help`.

    seqssm fit --config quickstart                                        # a packaged recipe, by name
    seqssm test --config runs/quickstart/lightning_logs/version_0/config.yaml \
                --ckpt_path runs/quickstart/lightning_logs/version_0/checkpoints/last.ckpt
    seqssm fit --config quickstart --ckpt_path last                       # resume the newest run
    seqssm export runs/quickstart/lightning_logs/version_0/checkpoints/last.ckpt my-model/  # a model folder
    seqssm convert mamba-130m/ mamba-130m-hf/ --to hf                     # seqssm / HF Mamba / mamba_ssm folders
    seqssm generate mamba-130m-hf/ --prompt "Hello"                       # text with the folder's tokenizer.json
    seqssm generate state-spaces/mamba-130m-hf --prompt "Hello"           # a Hub id: fetched once, then cached
    seqssm data download imdb                                             # fetch, verify, unpack into data/imdb
    seqssm study species --preset cpu-small --out runs/species-small      # the study of Ulbaek 2024 thesis, 16
    seqssm rl --config rl/repeat_first_easy/s5                            # a recurrent PPO agent on POPGym
    seqssm rl-eval runs/rl/repeat_first_easy/s5/best.pt --episodes 96
    seqssm reproduce all --out runs/reproduce                             # the papers' comparisons, with verdicts

`fit | validate | test | predict` are LightningCLI's (`seqssm.tasks.lightning_cli`). The model's input and output
sizes (`vocab_size`, `d_input`, `n_classes`) and the `mask_token_id` come from the DataModule. Each run of `fit` is
a new version, `<default_root_dir>/lightning_logs/version_N/` (config.yaml, metrics.csv, and checkpoints/: best by
the task's validation metric, and `last.ckpt`); `--ckpt_path last` resumes the newest run in its own folder, and a
second `fit` in a default_root_dir that a run is writing to is refused. `last.ckpt` is refreshed every 10 minutes
and on Ctrl-C / SIGTERM, which then stop the run (exit code 128 + signal). `export` and `convert` refuse a non-empty
output folder unless given `--overwrite`, which replaces a model folder only. Models are named by folder, task
checkpoint or Hub id (`seqssm.models.loading`).

A mistake of the user (a `seqssm.errors.SeqssmError`: a missing or unreadable file, an unknown option, a bad
value; or a file-system error naming a path) is one line `seqssm CMD: error: MESSAGE` and exit code 2, with no
traceback; SEQSSM_DEBUG=1 shows the traceback instead.
"""

from __future__ import annotations

import importlib
import os
import shlex
import sys
from pathlib import Path
from typing import Callable, NamedTuple

from .arguments import ArgumentParser, closest, resolve_device
from .errors import MissingExtraError, SeqssmError, TrainingInterrupted, UsageError, user_error_in
from .recipes import config_args


class Command(NamedTuple):
    """A subcommand: its line in `seqssm --help`, and what runs it on the arguments after its name."""

    summary: str
    run: Callable[[list[str]], object]


def lightning(name: str) -> Callable[[list[str]], object]:
    """The LightningCLI subcommand `name`."""
    def run(argv: list[str]):
        return make_cli([name, *config_args(argv)])  # --config: a path, or a packaged recipe's name
    return run


def imported(target: str, extra: str | None = None) -> Callable[[list[str]], object]:
    """The function `target` ("module:function"), imported when it runs, so that `seqssm --help` loads nothing
    heavy; a missing third-party module names the pip extra that brings it."""
    def run(argv: list[str]):
        module, _, function = target.partition(":")
        try:
            handler = getattr(importlib.import_module(module), function)
        except ModuleNotFoundError as e:
            if extra is None or (e.name or "").startswith("seqssm"):
                raise
            if "-h" in argv or "--help" in argv:
                # the parser needs the extra's modules; the command's own docstring says what it does
                print(f"{module_docstring(module)}\n\nRunning it needs the {extra} extra ({e.name} is "
                      f"missing): pip install 'seqssm[{extra}]'; then --help lists every option.")
                return None
            raise MissingExtraError(f"needs the {extra} extra ({e.name} is missing): pip install 'seqssm[{extra}]'")
        return handler(argv)
    return run


def module_docstring(module: str) -> str:
    """The docstring of `module`, read from its source without importing it (its imports may be missing)."""
    import ast

    # not importlib.util.find_spec: it imports the parent packages, which import the missing modules
    top, *rest = module.split(".")
    path = Path(importlib.import_module(top).__file__).parent.joinpath(*rest).with_suffix(".py")
    if not path.is_file():
        return ""
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def export(argv: list[str]) -> None:
    """`seqssm export CKPT OUT_DIR [--push-to-hub ORG/NAME]`: write a checkpoint's model as a model folder
    (config.json, model.safetensors, README.md model card), and upload it to the Hugging Face Hub if asked."""
    from .models.hub import check_repo_id, push_to_hub
    from .models.loading import export_checkpoint

    parser = ArgumentParser(prog="seqssm export", description=export.__doc__)
    parser.add_argument("ckpt", help="Lightning checkpoint of a seqssm task (.ckpt)")
    parser.add_argument("out_dir", help="folder to write; load it with SequenceModel.from_pretrained")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the model folder OUT_DIR (default: refuse a non-empty one; other files are "
                             "never replaced)")
    parser.add_argument("--push-to-hub", metavar="ORG/NAME", help="then upload OUT_DIR to this Hub repository")
    parser.add_argument("--private", action="store_true", help="create the Hub repository private")
    parser.add_argument("--revision", help="the Hub branch to upload to (default: main)")
    ns = parser.parse_args(argv)
    if ns.push_to_hub:
        check_repo_id(ns.push_to_hub, "--push-to-hub")  # before the folder is written
    out = export_checkpoint(ns.ckpt, ns.out_dir, overwrite=ns.overwrite)
    print(f"exported {ns.ckpt} -> {out}/config.json, {out}/model.safetensors, {out}/README.md")
    if ns.push_to_hub:
        print(f"uploaded {out} -> {push_to_hub(out, ns.push_to_hub, private=ns.private or None, revision=ns.revision)}")


def convert(argv: list[str]) -> None:
    """`seqssm convert SRC DST --to hf|seqssm`: rewrite a pretrained model in another format."""
    import json

    from .models.interop import architecture_overrides, convert_folder

    parser = ArgumentParser(prog="seqssm convert", description=convert.__doc__)
    parser.add_argument("src", help="a seqssm, Hugging Face Mamba or mamba_ssm folder, a task checkpoint, or a Hub "
                        "id ORG/NAME")
    parser.add_argument("dst", help="folder to write")
    parser.add_argument("--to", choices=("hf", "seqssm"), required=True, help="format of DST")
    parser.add_argument("--revision", help="of a Hub id SRC: a branch, tag or commit (default: main)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the model folder DST (default: refuse a non-empty one)")
    ns = parser.parse_args(argv)
    model, copied = convert_folder(ns.src, ns.dst, ns.to, overwrite=ns.overwrite, revision=ns.revision)
    print(f"converted {ns.src} -> {ns.dst} ({ns.to}{', with ' + ', '.join(copied) if copied else ''})")
    print("to finetune it: seqssm fit --model.init_args.init_from", ns.dst, "with model_overrides:",
          json.dumps(architecture_overrides(model.config)))


def generate(argv: list[str]) -> None:
    """`seqssm generate PATH --prompt TEXT`: continue a prompt with a pretrained language model."""
    import torch

    from .data.tokenized import TOKENIZER_FILE, PretrainedTokenizer
    from .models.formats.files import folder_file
    from .models.loading import build, read_pretrained
    from .models.sequence_model import check_max_new_tokens, check_temperature, check_top_k

    parser = ArgumentParser(prog="seqssm generate", description=generate.__doc__)
    parser.add_argument("path", help="a seqssm, Hugging Face Mamba or mamba_ssm folder, a task checkpoint, or a Hub "
                        "id ORG/NAME (a local folder of that name wins)")
    parser.add_argument("--revision", help="of a Hub id: a branch, tag or commit (default: main)")
    parser.add_argument("--prompt", required=True,
                        help=f"text when the folder has a {TOKENIZER_FILE}, else token ids separated by spaces")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto (default: CUDA when available, else CPU), cpu, cuda, "
                        "cuda:N")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="on CUDA: replay each decoding step as one recorded CUDA graph (the same tokens, far less "
                             "launch overhead per token; not for models with attention layers)")
    ns = parser.parse_args(argv)
    device = resolve_device(ns.device)
    if ns.cuda_graph and device.type != "cuda":
        raise UsageError(f"--cuda-graph replays CUDA graphs, but the model runs on {device}: give --device cuda (or "
                         "auto on a machine with CUDA), or leave --cuda-graph out")
    try:  # the same checks as SequenceModel.generate, before anything is loaded, naming the options
        check_max_new_tokens(ns.max_new_tokens, "--max-new-tokens")
        check_temperature(ns.temperature, "--temperature")
        check_top_k(ns.top_k, "--top-k")
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from e
    pretrained = read_pretrained(ns.path, "PATH", revision=ns.revision)
    folder = pretrained.path if pretrained.path.is_dir() else None
    tokenizer = PretrainedTokenizer(folder) if folder and folder_file(folder, TOKENIZER_FILE).is_file() else None
    ids = tokenizer.encode(ns.prompt).tolist() if tokenizer else prompt_ids(ns.prompt, TOKENIZER_FILE)
    if not ids:
        raise UsageError("--prompt encodes to no tokens: give at least one")
    model = build(pretrained).eval().to(device)
    if not (model.is_lm and model.causal):
        raise UsageError(f"{ns.path} holds a {'classifier' if not model.is_lm else 'bidirectional model'}, not a "
                         "causal language model: generate continues prompts with next-token models only")
    outside = sorted({i for i in ids if not 0 <= i < model.vocab_size})
    if outside:
        raise UsageError(f"--prompt has token ids outside the model's vocabulary [0, {model.vocab_size}): "
                         f"{', '.join(map(str, outside[:8]))}")
    if ns.cuda_graph and model.config.attn_layer_idx:
        raise UsageError(f"--cuda-graph replays one graph on fixed-size states, and {ns.path} has attention layers "
                         "whose cache grows with every token: leave --cuda-graph out")
    out = model.generate(torch.tensor([ids], device=device), ns.max_new_tokens, temperature=ns.temperature,
                         top_k=ns.top_k, generator=torch.Generator(device).manual_seed(ns.seed),
                         cuda_graph=ns.cuda_graph)[0].tolist()
    print(tokenizer.decode(out) if tokenizer else " ".join(map(str, out)))


def prompt_ids(prompt: str, tokenizer_file: str) -> list[int]:
    """The token ids written in `prompt` ("12 7 301" or "12,7,301"), for a folder without a tokenizer."""
    try:
        return [int(t) for t in prompt.replace(",", " ").split()]
    except ValueError:
        raise UsageError(f"the folder has no {tokenizer_file}, so --prompt must be token ids (e.g. \"12 7 301\"), "
                         f"got {prompt!r}") from None


COMMANDS = {
    "fit": Command("train a model: --config <study>/<model> (a packaged recipe) or FILE.yaml (LightningCLI)", lightning("fit")),
    "validate": Command("validation metrics of a checkpoint: --config CONFIG --ckpt_path CKPT", lightning("validate")),
    "test": Command("test metrics of a checkpoint: --config CONFIG --ckpt_path CKPT", lightning("test")),
    "predict": Command("predictions of a checkpoint: --config CONFIG --ckpt_path CKPT", lightning("predict")),
    "export": Command("write a checkpoint's network as a model folder: CKPT OUT_DIR", export),
    "convert": Command("rewrite a model (seqssm, Hugging Face Mamba, mamba_ssm, Hub id): SRC DST --to hf|seqssm",
                       convert),
    "generate": Command("continue a prompt with a pretrained language model: PATH --prompt TEXT", generate),
    "data": Command("datasets: list what is on disk, download the published files, prepare offline ones",
                    imported("seqssm.data.cli:main")),
    "study": Command("run a whole study (species): pretraining stages, surgery, finetuning arms, report",
                     imported("seqssm.study.cli:main")),
    "rl": Command("train a recurrent RL agent (PPO or SAC): --config rl/<env>/<core> (a packaged recipe) or FILE.yaml",
                  imported("seqssm.rl.cli:rl_main", extra="rl")),
    "rl-eval": Command("play a trained RL agent and report its returns: CKPT",
                       imported("seqssm.rl.cli:eval_main", extra="rl")),
    "reproduce": Command("re-run a source paper's comparison in miniature, with verdicts: CLAIM|all|list",
                         imported("seqssm.study.reproduce.cli:main")),
    "recipes": Command("the packaged recipes: list [PREFIX] | copy NAME DIR (a recipe and its bases, to edit)",
                       imported("seqssm.recipes.cli:main")),
}


def overview() -> str:
    """What `seqssm --help` prints: the usage line and every subcommand with its summary."""
    width = max(map(len, COMMANDS))
    lines = [f"  {name.ljust(width)}  {command.summary}" for name, command in COMMANDS.items()]
    return "\n".join(["usage: seqssm COMMAND [ARGS]   (seqssm COMMAND --help: its options)", "", "commands:", *lines,
                      "", "A mistake is one line `seqssm COMMAND: error: ...` with exit code 2; SEQSSM_DEBUG=1 shows "
                      "the traceback."])


def main(args: list[str] | None = None) -> None:
    """Entry point of the `seqssm` console script."""
    argv = sys.argv[1:] if args is None else list(args)
    if not argv or argv[0] in ("-h", "--help"):
        print(overview(), file=sys.stdout if argv else sys.stderr)
        if not argv:
            sys.exit(2)
        return
    name = argv[0]
    if name not in COMMANDS:
        match = closest(name, COMMANDS, cutoff=0.6)
        hint = f"did you mean {match!r}?" if match else f"the commands: {', '.join(COMMANDS)}"
        fail("seqssm", f"unknown command {name!r}; {hint} (seqssm --help lists them)")
    try:
        COMMANDS[name].run(argv[1:])
    except TrainingInterrupted as e:
        stopped = f"seqssm: training stopped by {e.signal_name} at global step {e.global_step}"
        if name == "fit":
            print(f"{stopped}; the run is saved in {e.checkpoint}.\nResume it with: {resume_command(argv)}",
                  file=sys.stderr)
        elif name == "study":
            print(f"{stopped}. Run the same command again to go on: finished stages are kept, this one starts over.",
                  file=sys.stderr)
        else:
            print(f"seqssm: {e}", file=sys.stderr)
        sys.exit(128 + e.signum)  # the shell's code for "ended by this signal": `fit && test` must not go on
    except Exception as e:
        cause = user_error(e)
        if cause is None or os.environ.get("SEQSSM_DEBUG", "") not in ("", "0"):
            raise
        fail(getattr(cause, "prog", None) or f"seqssm {name}", describe(cause))


def fail(prog: str, message: str):
    """Print `prog: error: message` on stderr and exit with status 2 (a usage or input error, as argparse's)."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(2)


def user_error(error: BaseException) -> BaseException | None:
    """The user's mistake in `error`: the first SeqssmError in its chain of causes (jsonargparse wraps errors raised
    while instantiating a class in its own), or `error` itself when it is a file-system error naming a path
    (permission denied, no space left); None when it is neither, a bug to show with its traceback."""
    if isinstance(error, OSError) and error.filename is not None:
        return error
    return user_error_in(error)


def describe(error: BaseException) -> str:
    """The message of a user error: a SeqssmError's own, or "PATH: what went wrong" for a file-system error."""
    if isinstance(error, OSError) and not isinstance(error, SeqssmError):
        return f"{error.filename}: {error.strerror or error}"
    return str(error)


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


def make_cli(args=None, run: bool = True):
    """The LightningCLI of `fit | validate | test | predict` on `args` (`seqssm.tasks.lightning_cli.make_cli`),
    imported only when a command needs it."""
    from .tasks.lightning_cli import make_cli as make

    return make(args, run)


if __name__ == "__main__":
    main()
