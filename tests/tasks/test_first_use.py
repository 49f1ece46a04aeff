"""What a new user meets on a first run (issue 35): a start that fails on missing data writes nothing, an evaluation
of untrained weights or a resume of a finished run says so, init_from says what it loaded, abbreviated options
are refused."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_cli import run, workdir  # noqa: F401

from seqssm.cli import main

from .helpers import one_thread  # noqa: F401

LAST = Path("run") / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"


def fit(*args):
    main(["fit", "--config", "tiny.yaml", "--torch_threads", "1", *args])


def test_a_fit_without_its_data_leaves_no_version_folder(workdir, capsys):
    recipe = yaml.safe_load((workdir / "tiny.yaml").read_text())
    recipe["data"] = {"class_path": "seqssm.data.ListOpsDataModule",
                      "init_args": {"data_dir": "no-listops", "max_length": 32}}
    (workdir / "listops.yaml").write_text(yaml.safe_dump(recipe))
    code, err = run(["fit", "--config", "listops.yaml"], capsys)
    assert code == 2 and "Dataset file or directory not found: no-listops/basic_train.tsv" in err
    assert not (workdir / "run").exists(), "a failed start leaves nothing behind"


def test_evaluating_untrained_weights_and_resuming_a_finished_run_say_so(workdir, capsys, caplog):
    fit()
    capsys.readouterr()
    fit("--ckpt_path", "last")
    err = capsys.readouterr().err
    assert (f"seqssm fit: nothing trained: {LAST} had already reached max_epochs=1 (global step 4, epoch 1); "
            "raise --trainer.max_epochs to train on") in err

    main(["test", "--config", "tiny.yaml"])
    err = capsys.readouterr().err
    assert ("seqssm test: warning: no --ckpt_path and no init_from: evaluating randomly initialised weights; give "
            "--ckpt_path CKPT") in err
    main(["test", "--config", "tiny.yaml", "--ckpt_path", str(LAST)])
    assert "warning" not in capsys.readouterr().err

    with caplog.at_level(logging.INFO):
        logging.getLogger("lightning.pytorch").addHandler(caplog.handler)
        try:
            fit("--model.init_args.init_from", str(LAST), "--model.init_args.reinit_head", "true",
                "--trainer.max_steps", "1")
        finally:
            logging.getLogger("lightning.pytorch").removeHandler(caplog.handler)
    lines = {r.getMessage() for r in caplog.records if r.name.startswith("lightning") and "init_from" in r.getMessage()}
    assert lines == {f"init_from {LAST}: loaded 12 of 14 tensors; head re-initialised (head.weight, head.bias)"}


def test_an_abbreviated_option_is_refused_with_the_full_one(workdir, capsys):
    code, err = run(["fit", "--config", "tiny.yaml", "--trainer.max_epoch", "2"], capsys)
    assert (code, err) == (2, "seqssm fit: error: unknown option '--trainer.max_epoch'; did you mean "
                              "'--trainer.max_epochs'?\n")
    code, err = run(["export", "a.ckpt", "out", "--overwr"], capsys)
    assert (code, err) == (2, "seqssm export: error: unknown option '--overwr'; did you mean '--overwrite'?\n")
    assert not (workdir / "run").exists()


def help_text(argv: list[str], capsys) -> str:
    """The help `seqssm ARGV` prints (exit code 0), with its line wrapping undone."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_every_task_and_checkpoint_option_has_help(capsys):
    text = help_text(["fit", "--model.help", "Classification"], capsys)
    for option, words in [("model_overrides MODEL_OVERRIDES", "changes to that model's config"),
                          ("lr_reference_length LR_REFERENCE_LENGTH", "Ulbaek 2024's length rule"),
                          ("init_from INIT_FROM", "pretrained weights to start from"),
                          ("reinit_head {true,false}", "keep the head freshly initialised"),
                          ("freeze_backbone {true,false}", "train only the head")]:
        assert f"--model.{option} {words}" in text, option
    text = help_text(["fit", "--help"], capsys)
    assert "--checkpoint.last_every_n_minutes LAST_EVERY_N_MINUTES also refresh last.ckpt" in text
    assert ("--checkpoint.monitor MONITOR the logged metric that picks the best checkpoint. null (default): the task's "
            "own") in text
    assert "saves a checkpoint only for the last epoch" not in text


def test_rl_help_without_the_rl_extra_prints_the_help_and_names_the_extra():
    code = "import sys; sys.modules['gymnasium'] = None; from seqssm.cli import main; main(['rl', '--help'])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("`seqssm rl` (train an agent")
    assert result.stdout.rstrip().endswith("Running it needs the rl extra (gymnasium is missing): pip install "
                                           "'seqssm[rl]'; then --help lists every option.")


def test_from_pretrained_returns_the_model_in_eval_mode(tmp_path):
    from seqssm.models import SequenceModel, build

    model = build("mamba-s6", vocab_size=12, d_model=16, n_layers=1, dropout=0.1)
    folder = model.save_pretrained(tmp_path / "folder")
    loaded = SequenceModel.from_pretrained(folder)
    assert not any(m.training for m in loaded.modules()), "dropout off, as Hugging Face's from_pretrained"
    assert all(m.training for m in loaded.train().modules()), "train() still turns it on for finetuning"


def test_a_run_and_its_resume_print_no_noise(workdir, capsys, caplog, recwarn):
    with caplog.at_level(logging.INFO):
        logging.getLogger("lightning.pytorch").addHandler(caplog.handler)
        try:
            fit("--trainer.max_steps", "2")
            fit("--ckpt_path", "last")
        finally:
            logging.getLogger("lightning.pytorch").removeHandler(caplog.handler)
    said = capsys.readouterr().err + caplog.text + "\n".join(str(w.message) for w in recwarn)
    assert "Restored all states from the checkpoint" in said, "Lightning's own lines still show"
    for noise in ("litlogger", "LeafSpec", "exists and is not empty"):
        assert noise not in said
