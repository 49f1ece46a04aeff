"""The species study: the lr rule of Ulbaek 2024 thesis, 16.3, in the recipes, reversed pretraining windows,
a tiny study end to end."""

import json
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import yaml

from seqssm.cli import main, make_cli
from seqssm.models import SequenceModel
from seqssm.study import species as study
from seqssm.study.species import PRESETS, Preset, SpeciesStudy, StudyError
from seqssm.tasks import Classification, MaskedLM, NextTokenPrediction
from seqssm.recipes import read_recipe

RECIPES = Path(__file__).parents[2] / "seqssm" / "recipes" / "species"
TINY = Preset(
    lengths=(32,), widths={"causal": 16, "bidirectional": 12},
    overrides={"all": {"trainer": {"max_steps": 4, "max_epochs": 2},
                       "model": {"init_args": {"model_overrides": {"n_layers": 1}}},
                       "data": {"init_args": {"batch_size": 4, "val_size": 8, "num_workers": 0}}},
               "finetune": {"data": {"init_args": {"finetune_bases": 256}}}},
    synthetic={"chrom_length": 2_000, "concentration": 1.0, "seed": 0},
)


TASKS = {"seqssm.tasks.Classification": (Classification, {"n_classes": 5}),
         "seqssm.tasks.NextTokenPrediction": (NextTokenPrediction, {}),
         "seqssm.tasks.MaskedLM": (MaskedLM, {"mask_token_id": 4})}


@pytest.mark.parametrize("recipe, expected", [
    # Ulbaek 2024 thesis, 16.3: finetune 1e-3 * 1024 / L, pretrain 4e-3 * 2048 / L
    ("finetune.yaml", {4096: 2.5e-4, 8192: 1.25e-4, 16384: 6.25e-5, 32768: 3.125e-5}),
    ("pretrain_ntp.yaml", {4096: 2e-3, 8192: 1e-3, 16384: 5e-4, 32768: 2.5e-4}),
    ("pretrain_ntp_reverse.yaml", {4096: 2e-3, 8192: 1e-3, 16384: 5e-4, 32768: 2.5e-4}),
    ("pretrain_mlm_bi.yaml", {4096: 2e-3, 8192: 1e-3, 16384: 5e-4, 32768: 2.5e-4}),
])
def test_recipes_scale_the_lr_with_the_configured_length(recipe, expected):
    config = read_recipe(RECIPES / recipe)["model"]
    task_class, outputs = TASKS[config["class_path"]]
    args = {**config["init_args"], "model_overrides": {"n_layers": 1}}  # the lr rule needs no full-size network
    for length, lr in expected.items():
        task = task_class(**args, vocab_size=12, **outputs, max_length=length)
        assert task.peak_lr == pytest.approx(lr, rel=1e-12)
        assert task.hparams.lr == args["lr"]  # the recipe's value is kept; only the optimizer sees the scaled one


def test_the_length_rule_needs_the_training_length():
    with pytest.raises(ValueError, match="max_length must be the training length"):
        NextTokenPrediction(vocab_size=12, lr_reference_length=2048, model_overrides={"n_layers": 1})


@pytest.mark.parametrize("recipe", sorted(p.name for p in RECIPES.glob("*.yaml") if p.name != "base.yaml"))
def test_recipe_builds_through_the_cli(recipe, monkeypatch):
    monkeypatch.setattr("sys.argv", ["seqssm"])
    cli = make_cli(["--config", str(RECIPES / recipe), "--data.init_args.max_length", "8192"], run=False)
    assert cli.model.hparams.vocab_size == cli.datamodule.vocab_size == 12
    # table 6's widths; the Mamba-2 arm at the same budget (seqssm/recipes/README.md)
    assert cli.model.model.config.d_model == (107 if "mlm_bi" in recipe else 104 if "mamba2" in recipe else 116)
    # max_length reached the task through the CLI link: the peak lr is half the one at 4096
    assert cli.model.hparams.max_length == 8192
    assert cli.model.peak_lr == pytest.approx((1.25e-4 if recipe.startswith("finetune") else 1e-3), rel=1e-12)


def test_recipes_hold_the_thesis_settings():
    pre = {r: read_recipe(RECIPES / r)
           for r in ("pretrain_ntp.yaml", "pretrain_ntp_reverse.yaml", "pretrain_mlm_bi.yaml")}
    fine = read_recipe(RECIPES / "finetune.yaml")
    for config in [*pre.values(), fine]:
        # Ulbaek 2024 thesis, 16.3: batch 32; 12.2.4: the SSP initialisation; 12.1.4: dropout on the SSP's input
        assert config["data"]["init_args"]["batch_size"] == 32
        overrides = config["model"]["init_args"]["model_overrides"]
        assert overrides["ssp_init"] == "thesis" and overrides["dropout_position"] == "ssp_input"
        assert "finetune_chromosomes" not in config["data"]["init_args"]  # the data module's default: smallest
    for config in pre.values():
        assert config["trainer"]["max_steps"] == 6250 and config["model"]["init_args"]["weight_decay"] == 0
        assert config["model"]["init_args"]["model_overrides"]["dropout"] == 0
        data = config["data"]["init_args"]
        assert data["train_subset"] == "pretrain" and data["train_size"] == 32 * 6250 // 5
    assert pre["pretrain_ntp_reverse.yaml"]["data"]["init_args"]["reverse"] is True
    assert pre["pretrain_mlm_bi.yaml"]["model"]["init_args"]["model"] == "mamba-s6-bi"
    assert fine["trainer"]["max_steps"] == 3125 and fine["model"]["init_args"]["model_overrides"]["dropout"] == 0.1
    assert fine["data"]["init_args"]["train_subset"] == "finetune"
    assert fine["data"]["init_args"]["finetune_bases"] == 1_000_000
    assert fine["data"]["init_args"]["train_size"] * 5 == 100_000  # 3125 steps of 32 (16.3)


def test_thesis_preset_batch_and_widths(tmp_path):
    s = SpeciesStudy(tmp_path, data_dir=tmp_path / "genomes")
    assert s.widths == {"causal": 116, "bidirectional": 107, "f1": 107}  # table 6; F1 pretrains at 107 (16.7.2)
    for length in (4096, 16384, 32768):
        config = s.run_config("finetune", "finetune.yaml", length, tmp_path / "run", {})
        assert config["data"]["init_args"]["batch_size"] == 32  # 16.3, at every length
        assert config["data"]["init_args"]["train_size"] == 32 * 625  # 3125 steps over 5 validations
    with pytest.raises(StudyError, match="--data-dir"):
        SpeciesStudy(tmp_path)
    with pytest.raises(StudyError, match="f1_width"):
        SpeciesStudy(tmp_path, data_dir=tmp_path, f1_width="wide")


def arm_parameters(s: SpeciesStudy, arm: str) -> int:
    """The parameter count of arm `arm` of study `s` on the species task, built as the study builds it: from the
    finetuning recipe's model, or for surgery arms by the surgery on causal models at the width they pretrain at."""
    from seqssm.models import build, surgery

    spec = study.ARMS[arm]
    overrides = {**s._config("finetune", "finetune.yaml")["model"]["init_args"]["model_overrides"],
                 "d_model": s.widths[spec.width]}
    task = {"vocab_size": 12, "n_classes": 5}
    if spec.surgery is None:
        return surgery.count_parameters(build("mamba-s6-bi" if spec.bidirectional else "mamba-s6", **task, **overrides))
    operation, stages = study.SURGERIES[spec.surgery]
    parents = [build("mamba-s6", vocab_size=12, **overrides) for _ in stages]  # language models, as pretrained
    model = getattr(surgery, operation)(*parents)
    return surgery.count_parameters(SequenceModel(model.config.replace(n_classes=5, pooling="mean")))


def test_every_thesis_arm_has_its_table6_models_parameter_count(tmp_path):
    from seqssm.models import build
    from seqssm.models.surgery import count_parameters

    s = SpeciesStudy(tmp_path, data_dir=tmp_path)
    counts = {arm: arm_parameters(s, arm) for arm in study.ARMS}
    # table 6's rows on the species task (12 tokens, 5 classes): Mamba-s6 at d=116, Mamba-s6-Bi at d=107
    causal = count_parameters(build("mamba-s6", vocab_size=12, n_classes=5))
    bidirectional = count_parameters(build("mamba-s6-bi", vocab_size=12, n_classes=5))
    for arm, n in counts.items():
        row = bidirectional if study.ARMS[arm].bidirectional else causal
        assert abs(n / row - 1) <= 0.01, (arm, n, row)
    assert counts["f1"] == counts["f1r1"] == counts["mlm-bi"] == counts["bidirectional"] == bidirectional
    assert counts["regular"] == counts["ntp"] == causal
    # the earlier setting, F1 pretrained at the causal width, is ~16% larger than the arms it is compared with
    old = SpeciesStudy(tmp_path, data_dir=tmp_path, f1_width="causal")
    assert old.widths["f1"] == 116 and old.stage("ntp-f1") == "ntp" and old.stage("ntp-reverse-warm") == "ntp-reverse-warm"
    assert arm_parameters(old, "f1") / bidirectional > 1.15
    assert s.stage("ntp-f1") == "ntp-f1"


def test_reverse_pretraining_stage_sees_reversed_windows(tmp_path, monkeypatch):
    monkeypatch.setitem(PRESETS, "tiny", TINY)
    s = SpeciesStudy(tmp_path, preset="tiny")
    s.prepare_data()

    def train_items(stage):
        spec = study.PRETRAINING[stage]
        config = s.run_config("pretrain", spec.recipe, 32, tmp_path / stage, {})
        (tmp_path / f"{stage}.yaml").write_text(yaml.safe_dump(config))
        monkeypatch.setattr("sys.argv", ["seqssm"])
        data = make_cli(["--config", str(tmp_path / f"{stage}.yaml")], run=False).datamodule
        data.setup()
        return data, [data.splits[split][i][0] for split in ("train", "val") for i in range(6)]

    forward_data, forward = train_items("ntp")
    reverse_data, reverse = train_items("ntp-reverse")
    assert reverse_data.reverse and not forward_data.reverse and reverse_data.train_subset == "pretrain"
    for f, r in zip(forward, reverse):
        np.testing.assert_array_equal(r, f[::-1])
    assert any(not np.array_equal(f, f[::-1]) for f in forward)


class Crash(L.Callback):
    """Stands in for an interruption: fails the fit in its second epoch."""

    def on_train_batch_start(self, trainer, *args):
        if trainer.global_step == 3:
            raise RuntimeError("interrupted")


def test_tiny_study_through_the_cli_then_resumes_without_rerunning_finished_arms(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib", reason="the study's plot needs the plot extra: pip install 'seqssm[plot]'")
    monkeypatch.setitem(PRESETS, "tiny", TINY)
    out = tmp_path / "study"
    args = ["study", "species", "--preset", "tiny", "--out", str(out), "--arms", "regular", "f1"]

    fit = SpeciesStudy._fit

    def crash_in_f1_arm(self, name, run_dir, config):
        if name == "32/f1":
            config = study.merge(config, {"trainer": {"callbacks": [{"class_path": f"{__name__}.Crash"}]}})
        return fit(self, name, run_dir, config)

    monkeypatch.setattr(SpeciesStudy, "_fit", crash_in_f1_arm)
    with pytest.raises(RuntimeError, match="interrupted"):
        main(args)
    regular = out / "32" / "regular" / "result.json"
    assert regular.is_file() and not (out / "32" / "f1" / "result.json").exists()
    assert (out / "32" / "f1" / "checkpoints").is_dir()
    before = (regular.stat().st_mtime_ns, regular.read_text())

    monkeypatch.setattr(SpeciesStudy, "_fit", fit)
    capsys.readouterr()
    main(args)
    log = capsys.readouterr().out
    assert "32/regular: done before, skipped" in log and "32/pretrain/ntp-f1: done before, skipped" in log
    assert "32/f1: fitting (interrupted before: starting over)" in log
    assert (regular.stat().st_mtime_ns, regular.read_text()) == before

    results = json.loads((out / "results.json").read_text())
    f1 = results["finetune"]["f1"]["32"]
    assert f1["steps"] == 4 and 0 <= f1["final"] <= 1 and f1["metric"] == "val_acc"
    assert f1["config"]["model"]["init_args"]["model"] == "mamba-s6-bi"
    assert f1["config"]["model"]["init_args"]["model_overrides"]["d_model"] == 12  # the bidirectional width
    ntp_f1 = results["pretrain"]["ntp-f1"]["32"]
    assert ntp_f1["config"]["model"]["init_args"]["model_overrides"]["d_model"] == 12  # pretrained at it too
    surgery = results["surgery"]["f1"]["32"]
    assert surgery["n_params"] == surgery["native_bidirectional_n_params"]
    assert f1["provenance"]["parents"][0]["path"] == surgery["folder"]
    assert f1["provenance"]["parents"][0]["provenance"]["operation"] == "to_bidirectional"
    # `seqssm export` of the arm's checkpoint keeps that lineage in the folder's config.json
    main(["export", f1["checkpoint"], str(tmp_path / "exported")])
    assert json.loads((tmp_path / "exported" / "config.json").read_text())["provenance"] == f1["provenance"]
    assert ntp_f1["fit_s"] >= ntp_f1["step_s"] >= ntp_f1["median_step_s"] > 0 and ntp_f1["lr"] > 0
    table = (out / "results.md").read_text()
    assert "| regular |" in table and "L=32" in table and "| ntp-f1 |" in table
    assert f"| f1 | 12 | {f1['n_params']:,} |" in table  # arm, width, parameters
    assert f"| regular | 16 | {results['finetune']['regular']['32']['n_params']:,} |" in table
    assert (out / "val_acc_vs_length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the same folder with other settings is refused, naming what differs
    monkeypatch.setitem(PRESETS, "tiny", Preset(**{**TINY.__dict__, "widths": {"causal": 20, "bidirectional": 12}}))
    with pytest.raises(SystemExit):
        main(args)
    assert "d_model: 16 -> 20" in capsys.readouterr().err
