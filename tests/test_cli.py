"""The `seqssm` command: fit / resume / test / export through the console script, DDP on CPU, and bad input to\nevery command: one line naming what is wrong, exit code 2 (SEQSSM_DEBUG=1: the traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tasks.helpers import one_thread  # noqa: F401  (autouse: tiny models run on one thread)

from seqssm.cli import COMMANDS, Command, imported, main
from seqssm.models import SequenceModel

TINY_RECIPE = {
    "seed_everything": 0,
    "trainer": {"max_epochs": 1, "default_root_dir": "run", "enable_progress_bar": False,
                "enable_model_summary": False, "log_every_n_steps": 1},
    "model": {"class_path": "seqssm.tasks.Classification",
              "init_args": {"model": "mamba-s6", "model_overrides": {"d_model": 16, "n_layers": 1, "dropout": 0.0},
                            "lr": 3e-3}},
    "data": {"class_path": "seqssm.data.SpeciesDataModule",
             "init_args": {"data_dir": "genomes", "generate": True, "generate_length": 4000, "species": ["human", "mouse"],
                           "max_length": 32, "batch_size": 16, "train_size": 64, "val_size": 32, "test_size": 32}},
}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder holding the tiny recipe; tests run inside it."""
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY_RECIPE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["seqssm"])
    return tmp_path


def seqssm(*args: str, cwd, timeout: int = 300, code: int = 0, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the installed console script (falling back to the module) and return the finished process, which must
    exit with `code`."""
    script = Path(sys.executable).with_name("seqssm")  # this environment's, whatever PATH holds
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "seqssm.cli"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}  # tiny models; threads only fight on a shared machine
    result = subprocess.run(command + list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == code, f"seqssm {' '.join(args)}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def global_step(path) -> int:
    return torch.load(path, map_location="cpu", weights_only=True)["global_step"]


def test_fit_resume_test_and_export(workdir, capsys):
    seqssm("fit", "--config", "tiny.yaml", cwd=workdir)
    logs = workdir / "run" / "lightning_logs" / "version_0"  # the run's folder: config, metrics, checkpoints
    last = logs / "checkpoints" / "last.ckpt"
    assert global_step(last) == 4
    assert any(p.name.startswith("epoch=0-step=4-val_acc=") for p in last.parent.iterdir())
    assert yaml.safe_load((logs / "hparams.yaml").read_text())["n_classes"] == 2  # linked from the data
    config = logs / "config.yaml"

    # the rest in this process: same entry point, without paying for another interpreter start
    main(["fit", "--config", "tiny.yaml", "--ckpt_path", "last", "--trainer.max_epochs", "2"])
    assert global_step(last) == 8, "resumed from step 4 and trained one more epoch"

    main(["test", "--config", str(config), "--ckpt_path", str(last)])
    assert "test_acc" in capsys.readouterr().out

    main(["export", str(last), "exported"])
    exported = SequenceModel.from_pretrained(workdir / "exported").eval()
    trained = SequenceModel.from_pretrained(last).eval()
    x = torch.randint(7, 11, (3, 32))
    with torch.no_grad():
        assert torch.equal(exported(x), trained(x))


@pytest.mark.parametrize("args, words", [
    (["--model.init_args.lr", "-1"], ["Classification.lr must be a positive number", "--model.init_args.lr"]),
    (["--model.init_args.lr", "fast"], ["model.init_args.lr = 'fast': expected float"]),
    (["--model.init_args.model", "mamba-s7"], ["unknown model 'mamba-s7'"]),
    (["--data.init_args.task", "ntp"], ["n_classes", "NextTokenPrediction"]),
    (["--model", "seqssm.tasks.NextTokenPrediction", "--model.init_args.model", "mamba-s6-bi"], ["causal"]),
    (["--weights_only", "false"], ["weights_only"]),
    (["--model.init_args.lrr", "0.1"], ["unknown option 'model.init_args.lrr'; did you mean 'model.init_args.lr'?"]),
    (["--model.init_args.d_modle", "64"], ["unknown option 'model.init_args.d_modle'; Classification takes model, "
                                           "model_overrides"]),
    (["--trainer.max_epoks", "2"], ["unknown option '--trainer.max_epoks'; did you mean '--trainer.max_epochs'?"]),
    (["--data.init_args.max_length", "0"], ["SpeciesDataModule: max_length must be an integer >= 1, got 0"]),
    (["--model", "seqssm.tasks.Classifcation"], ["no class 'seqssm.tasks.Classifcation'; did you mean "
                                                 "'seqssm.tasks.Classification'?"]),
])
def test_bad_config_values_fail_naming_the_field(workdir, capsys, args, words):
    code, err = run(["fit", "--config", "tiny.yaml", *args], capsys)
    assert code == 2 and err.startswith("seqssm fit: error: "), err
    for word in words:
        assert word in err


def test_a_typo_in_a_recipe_names_the_key_and_the_closest_one(workdir, capsys):
    recipe = yaml.safe_load((workdir / "tiny.yaml").read_text())
    recipe["trainer"]["max_epoch"] = recipe["trainer"].pop("max_epochs")
    recipe["_base_"] = "tiny.yaml"
    (workdir / "typo.yaml").write_text(yaml.safe_dump(recipe))
    code, err = run(["fit", "--config", "typo.yaml"], capsys)
    assert (code, err) == (2, "seqssm fit: error: unknown option 'trainer.max_epoch'; did you mean "
                              "'trainer.max_epochs'?\n")
    (workdir / "loop.yaml").write_text("_base_: loop.yaml\n")
    code, err = run(["fit", "--config", "loop.yaml"], capsys)
    assert code == 2 and "recipe bases loop:" in err and len(err.splitlines()) == 1


# -- every command: a missing path, a garbage file, a bad option value -> one line, exit code 2 ---------------------
class Payload:
    """Stands for code that a pickled checkpoint would run when loaded unsafely."""


@pytest.fixture
def bad_inputs(workdir):
    """Garbage files and folders in the working directory, one of each kind the commands read."""
    (workdir / "garbage.ckpt").write_bytes(bytes(range(256)) * 4)
    (workdir / "garbage.tar.gz").write_bytes(bytes(range(256)) * 4)
    (workdir / "garbage.yaml").write_text("trainer: [1\n")
    (workdir / "garbage-model").mkdir()
    (workdir / "garbage-model" / "config.json").write_text("{not json")
    for claim_or_study in ("rope", "species"):
        (workdir / "garbage-recipes" / claim_or_study).mkdir(parents=True)
    for name in ("rope/claim.yaml", "rope/data.yaml", "rope/smoke.yaml", "finetune.yaml"):
        (workdir / "garbage-recipes" / name).write_text("a: [1\n")
    torch.save({"state_dict": {}, "x": Payload()}, workdir / "unsafe.ckpt")
    torch.save({"format": "seqssm-rl", "version": 2, "config": {"algorithm": "dqn"}, "state_dict": {}},
               workdir / "dqn.pt")
    # weights that fit neither the agent its config describes nor the tiny recipe's model
    torch.save({"format": "seqssm-rl", "version": 2, "config": {"algorithm": "ppo"},
                "state_dict": {"encoder.0.weight": torch.zeros(3, 10), "extra": torch.zeros(1)}}, workdir / "unfit.pt")
    torch.save({"pytorch-lightning_version": "2.6.6", "state_dict": {"model.head.weight": torch.zeros(5, 16)}},
               workdir / "other-model.ckpt")
    return workdir


REPO = Path(__file__).resolve().parents[1]
RL_RECIPE = str(REPO / "seqssm" / "recipes" / "rl" / "repeat_first_easy" / "s5.yaml")
CASES = [  # (command line, words of the one error line)
    (["export", "nothere.ckpt", "out"], "checkpoint: no checkpoint file at nothere.ckpt"),
    (["export", "garbage.ckpt", "out"], "garbage.ckpt: unreadable: truncated, or not a file that torch.save wrote"),
    (["export", "unsafe.ckpt", "out"], "unsafe.ckpt: refused: it holds Python objects beyond tensors"),
    (["export", "garbage.ckpt", "out", "--ovewrite"], "unknown option '--ovewrite'; did you mean '--overwrite'?"),
    (["export", "garbage.ckpt", "out", "--push-to-hub", "not/a/valid/id"],
     "--push-to-hub 'not/a/valid/id' is not a Hub repository id (Repo id must be in the form"),
    (["convert", "nothere", "out", "--to", "hf"], "SRC: nothere: no such file or folder (nor a Hub id"),
    (["convert", "garbage-model", "out", "--to", "hf"], "garbage-model/config.json: not valid JSON"),
    (["convert", "garbage-model", "out", "--to", "onnx"], "argument --to: invalid choice: 'onnx'"),
    (["generate", "nothere", "--prompt", "hi"], "PATH: nothere: no such file or folder (nor a Hub id"),
    (["generate", "garbage.ckpt", "--prompt", "1"], "garbage.ckpt: unreadable: truncated, or not a file that torch"),
    (["generate", "garbage-model", "--prompt", "1", "--temperature", "-1"], "--temperature must be a finite number"),
    (["generate", "garbage-model", "--prompt", "1", "--device", "gpu0"], "--device = 'gpu0' is not a device"),
    (["data", "prepare", "imdb", "--source", "nothere.tar.gz", "--data-dir", "d"], "nothere.tar.gz does not exist"),
    (["data", "prepare", "imdb", "--source", "garbage.tar.gz", "--data-dir", "d"],
     "garbage.tar.gz: cannot read the archive"),
    (["data", "prepare", "listops", "--n-train", "-5", "--data-dir", "d"], "--n-train must be an integer >= 1, got -5"),
    (["data", "prepare", "listops", "--min-length", "500", "--max-length", "20", "--data-dir", "d"],
     "listops: min_length = 500 must be below max_length - 1 = 19"),
    (["data", "prepare", "listops", "--out", "garbage.ckpt"], "cannot write into garbage.ckpt: garbage.ckpt is a file"),
    (["study", "species", "--out", "st", "--preset", "cpu-small", "--recipes", "nothere"],
     "recipe nothere/finetune.yaml not found"),
    (["study", "species", "--out", "st", "--preset", "cpu-small", "--recipes", "garbage-recipes"],
     "garbage-recipes/finetune.yaml: not valid YAML: expected ',' or ']'"),
    (["study", "species", "--out", "st", "--preset", "cpu-small", "--lengths", "0"], "--lengths) must be integers >= 1"),
    (["rl", "--config", "nothere.yaml"], "--config: no recipe file or packaged recipe 'nothere.yaml'"),
    (["rl", "--config", "garbage.yaml"], "not valid YAML"),
    (["rl", "--config", RL_RECIPE, "--ppo.num_envs", "x"], "ppo.num_envs = 'x': expected int"),
    (["rl-eval", "nothere.pt"], "nothere.pt: no such file"),
    (["rl-eval", "garbage.ckpt"], "garbage.ckpt: unreadable"),
    (["rl-eval", "dqn.pt"], "an agent of the algorithm 'dqn', which this seqssm cannot play; it plays ppo, sac"),
    (["rl-eval", "unfit.pt"], "unfit.pt: its agent cannot be rebuilt from the config it stores (tensors of another "
                              "shape (1): encoder.0.weight is [3, 10] in the file, [128, 10] in the model; missing "
                              "from the file (47): encoder.0.bias,"),
    (["rl-eval", "garbage.ckpt", "--episods", "3"], "unknown option '--episods'; did you mean '--episodes'?"),
    (["reproduce", "rope", "--smoke", "--out", "rp", "--recipes", "nothere"], "nothere/rope/claim.yaml not found"),
    (["reproduce", "rope", "--smoke", "--out", "rp", "--recipes", "garbage-recipes"],
     "garbage-recipes/rope/claim.yaml: not valid YAML"),
    (["reproduce", "rope", "--out", "rp", "--jobs", "0"], "--jobs must be >= 1, got 0"),
    (["recipes", "copy", "quikstart", "out"], "no recipe file or packaged recipe 'quikstart'; did you mean quickstart?"),
    (["recipes", "copy", "quickstart", "garbage.ckpt"], "garbage.ckpt is a file, not a folder"),
    (["fit", "--config", "nothere.yaml"], "--config: no recipe file or packaged recipe 'nothere.yaml'"),
    (["fit", "--config", "garbage.yaml"], "not valid YAML: expected ',' or ']', but got '<stream end>' (line 2"),
    (["fit", "--config", "tiny.yaml", "--trainer.max_epochs", "x"], "trainer.max_epochs = 'x': expected int or None"),
    (["fit", "--config", "tiny.yaml", "--data.init_args.data_dir", "garbage.ckpt"],
     "data_dir = 'garbage.ckpt' cannot hold the dataset: garbage.ckpt is a file, not a folder"),
    (["fit", "--config", "tiny.yaml", "--ckpt_path", "nothere.ckpt"], "--ckpt_path nothere.ckpt: no such checkpoint"),
    (["fit", "--config", "tiny.yaml", "--ckpt_path", "garbage.ckpt"], "garbage.ckpt: unreadable: truncated"),
    (["test", "--config", "tiny.yaml", "--ckpt_path", "unsafe.ckpt"], "unsafe.ckpt: refused: it holds Python objects"),
    (["fit", "--config", "tiny.yaml", "--ckpt_path", "dqn.pt"],
     "--ckpt_path dqn.pt: not a checkpoint of `seqssm fit` (its format is 'seqssm-rl'): give a .ckpt"),
    (["fit", "--config", "tiny.yaml", "--ckpt_path", "other-model.ckpt"],
     "--ckpt_path other-model.ckpt: its weights do not fit the model this config builds (tensors of another shape (1): "
     "model.head.weight is [5, 16] in the file, [2, 16] in the model; missing from the file"),
]


def run(argv: list[str], capsys) -> tuple[int, str]:
    """(exit code, stderr without Lightning's "Seed set to" log line) of `seqssm ARGV`, run in this process."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    return exit_info.value.code, "".join(line for line in err.splitlines(True) if not line.startswith("Seed set to"))


# commands whose module needs an extra (`pip install -e .` alone lacks it): (a module of it, the extra)
EXTRAS = {"rl": ("gymnasium", "rl"), "rl-eval": ("gymnasium", "rl"), "reproduce": ("matplotlib", "plot")}


def skip_without_extra(command: str) -> None:
    """Skip, naming the extra, when `seqssm COMMAND` needs an extra that is not installed."""
    if command in EXTRAS:
        module, extra = EXTRAS[command]
        pytest.importorskip(module, reason=f"seqssm {command} needs the {extra} extra: pip install 'seqssm[{extra}]'")


@pytest.mark.parametrize("argv, words", CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_bad_input_to_every_command_is_one_line_with_exit_code_2(bad_inputs, capsys, argv, words):
    skip_without_extra(argv[0])
    code, err = run(argv, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"seqssm {argv[0]}") and ": error: " in lines[0] and words in lines[0], err
    assert "Traceback" not in err and "weights_only" not in err


def test_the_corpus_covers_every_command():
    assert {argv[0] for argv, _ in CASES} >= set(COMMANDS) - {"validate", "predict"}


def test_help_lists_every_command_and_a_bare_seqssm_shows_it_with_exit_code_2(capsys):
    main(["--help"])
    out = capsys.readouterr().out
    for name, command in COMMANDS.items():
        assert f"  {name.ljust(9)}  {command.summary}" in out
    assert len(COMMANDS) == 13
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2 and capsys.readouterr().err.startswith("usage: seqssm COMMAND")


@pytest.mark.parametrize("name, hint", [("exprot", "did you mean 'export'?"), ("rleval", "did you mean 'rl-eval'?"),
                                        ("frobnicate", "the commands: fit, validate, test, predict, export")])
def test_an_unknown_command_is_named_with_the_closest_one(capsys, name, hint):
    code, err = run([name], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"seqssm: error: unknown command {name!r}; {hint}")


def test_help_loads_neither_torch_nor_lightning():
    code = ("import sys; from seqssm.cli import main; main(['--help']); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning', 'jsonargparse'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == "[]", result.stderr


def test_a_command_whose_extra_is_missing_says_which_to_install(capsys):
    missing = Command("a command of an extra", imported("a_module_that_is_not_installed:main", extra="rl"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(COMMANDS, "needs-extra", missing)
        code, err = run(["needs-extra"], capsys)
    assert code == 2 and err == ("seqssm needs-extra: error: needs the rl extra (a_module_that_is_not_installed is "
                                 "missing): pip install 'seqssm[rl]'\n")


def test_subcommand_help_still_works(capsys):
    for argv in (["export", "--help"], ["data", "prepare", "--help"], ["reproduce", "--help"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 0 and "usage: seqssm" in capsys.readouterr().out


def test_the_console_script_prints_one_line_and_with_seqssm_debug_the_traceback(bad_inputs):
    quiet = seqssm("export", "garbage.ckpt", "out", cwd=bad_inputs, code=2)
    assert quiet.stderr == "seqssm export: error: garbage.ckpt: unreadable: truncated, or not a file that torch.save " \
                           "wrote\n"
    loud = seqssm("export", "garbage.ckpt", "out", cwd=bad_inputs, code=1, env={"SEQSSM_DEBUG": "1"})
    assert "Traceback" in loud.stderr and "seqssm.errors.CheckpointError: garbage.ckpt: unreadable" in loud.stderr


def test_ddp_two_cpu_processes(workdir):
    # Write the genomes and their FASTA indexes first: both ranks read them in setup, and pyfaidx building the
    # same index in two processes at once races (a DataModule issue, reported).
    from seqssm.data import SpeciesDataModule

    SpeciesDataModule(**TINY_RECIPE["data"]["init_args"]).setup()
    result = seqssm("fit", "--config", "tiny.yaml", "--trainer.strategy", "ddp", "--trainer.devices", "2",
                    "--trainer.accelerator", "cpu", "--trainer.max_epochs", "2", "--trainer.max_steps", "3",
                    "--checkpoint.last_every_n_train_steps", "1", cwd=workdir)
    output = result.stdout + result.stderr
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in output
    last = workdir / "run" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    last = torch.load(last, map_location="cpu", weights_only=True)
    # 64 windows split over 2 ranks at batch 16: 2 batches per rank and epoch (one process would have 4),
    # so step 3 falls in epoch 1
    assert last["global_step"] == 3 and last["epoch"] == 1
