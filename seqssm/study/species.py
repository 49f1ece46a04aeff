"""The species pretraining study (Ulbaek 2024 thesis, 16): every pretraining stage, surgery and finetuning arm,
per length.

    seqssm study species --lengths 4096 8192 16384 --data-dir data/species --out runs/species
    seqssm study species --preset cpu-small --out runs/species-small      # synthetic genomes, ~30 min on 2 cores

F1 and F1R1 pretrain their causal models at the bidirectional width (Ulbaek 2024 thesis, 16.7.2: F1 reaches the
parameter count of table 6 only when its SSPs are duplicated), so every finetuning arm has its table 6 model's parameter
count; `f1_width="causal"` (`--f1-width causal`) pretrains them at the causal width instead, as seqssm did before.

Each training stage is one `seqssm fit` run: its recipe from the packaged recipes' `species/`
(seqssm/recipes/species/), merged with the preset's overrides and the stage's length, width and parents, goes
through the same LightningCLI (`make_cli`) and Trainer. Layout under `--out`:

    <L>/pretrain/<stage>/     run.yaml, checkpoints/last.ckpt, result.json   (ntp, ntp-f1, ntp-reverse, -warm,
                              mlm-bi)
    <L>/surgery/<name>/       model/ (seqssm folder with provenance), result.json   (f1, f1r1, f1r1-warm)
    <L>/<arm>/                run.yaml, checkpoints/, result.json             (the finetuning arms)
    results.json, results.md, val_acc_vs_length.png

A stage with a result.json is done and is not run again, so a rerun after an interruption picks up
at the stage it stopped in (which starts over). A result.json written with different settings is an
error naming the settings that differ, not a silent reuse.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from seqssm.errors import StudyError
from seqssm.recipes import merge, read_recipe, recipes_root
from seqssm.study.fitting import RESULT, finished_record, fit_in_folder, restart_note, write_record

RECIPES = recipes_root() / "species"  # the packaged recipes' species/


@dataclass(frozen=True)
class Pretraining:
    """A pretraining stage: its recipe, the stage whose last checkpoint it starts from, the width it uses."""

    recipe: str
    width: str  # "causal", "bidirectional", or "f1": the width F1 / F1R1 pretrain at (the study's f1_width)
    init_from: str | None = None


@dataclass(frozen=True)
class Arm:
    """A finetuning arm: bidirectional or not, which preset width, and what it starts from."""

    bidirectional: bool
    width: str
    pretrain: str | None = None  # a Pretraining stage whose last.ckpt it starts from
    surgery: str | None = None  # or a SURGERIES entry whose folder it starts from


# A stage that comes out the same as an earlier one (same recipe, width and parent: "ntp-f1" when F1 pretrains at
# the causal width) is that stage, run once.
PRETRAINING = {
    "ntp": Pretraining("pretrain_ntp.yaml", "causal"),  # the NTP arm's
    "ntp-f1": Pretraining("pretrain_ntp.yaml", "f1"),  # F1's and F1R1's forward model
    "ntp-reverse": Pretraining("pretrain_ntp_reverse.yaml", "f1"),  # R1
    # R1 started from the forward model (Ulbaek 2024 thesis, 16.7.4)
    "ntp-reverse-warm": Pretraining("pretrain_ntp_reverse.yaml", "f1", init_from="ntp-f1"),
    "mlm-bi": Pretraining("pretrain_mlm_bi.yaml", "bidirectional"),
}
# surgery name -> (function name in seqssm.models.surgery, pretraining stages it takes, in argument order)
SURGERIES = {
    "f1": ("to_bidirectional", ("ntp-f1",)),
    "f1r1": ("fuse_f1r1", ("ntp-f1", "ntp-reverse")),
    "f1r1-warm": ("fuse_f1r1", ("ntp-f1", "ntp-reverse-warm")),
}
# F1 / F1R1 are bidirectional models at the width their causal parents pretrained at (surgery keeps widths).
ARMS = {
    "regular": Arm(False, "causal"),
    "bidirectional": Arm(True, "bidirectional"),
    "ntp": Arm(False, "causal", pretrain="ntp"),
    "mlm-bi": Arm(True, "bidirectional", pretrain="mlm-bi"),
    "f1": Arm(True, "f1", surgery="f1"),
    "f1r1": Arm(True, "f1", surgery="f1r1"),
    "f1r1-warm": Arm(True, "f1", surgery="f1r1-warm"),
}
FINETUNE_RECIPE = "finetune.yaml"
F1_WIDTHS = ("bidirectional", "causal")  # f1_width: Ulbaek 2024 thesis, 16.7.2, or seqssm's earlier setting


@dataclass(frozen=True)
class Preset:
    """Study-wide settings on top of the recipes: lengths, widths, recipe overrides, synthetic data."""

    lengths: tuple[int, ...]
    # {"causal", "bidirectional"}; None: Ulbaek 2024 thesis, table 6 (the registry's)
    widths: dict[str, int] | None = None
    overrides: dict[str, dict] = field(default_factory=dict)  # "all" / "pretrain" / "finetune" -> recipe overrides
    synthetic: dict[str, Any] | None = None  # write_genomes() arguments when the data folder has no genomes


PRESETS = {
    "thesis": Preset(lengths=(4096, 8192, 16384)),
    # The same grid at toy scale on synthetic genomes: per species an order-2 Markov chain with rows
    # ~ Dirichlet(3), so short windows are ambiguous and a tiny language model starts to learn the chains
    # within a hundred steps. Finetuning sees only the first 2048 bases of one chromosome per species
    # (16-64 windows). The lr keeps Ulbaek 2024's 1/L rule, with reference lengths matched to these lengths.
    "cpu-small": Preset(
        lengths=(32, 64, 128),
        widths={"causal": 32, "bidirectional": None},  # None: the parameter-matched width, computed
        overrides={
            "all": {
                "trainer": {"gradient_clip_val": 1.0},
                "model": {"init_args": {"model_overrides": {"n_layers": 2}}},
                "data": {"init_args": {"batch_size": 16, "val_size": 256, "num_workers": 0}},
            },
            "pretrain": {"trainer": {"max_steps": 120, "max_epochs": 1},
                         "model": {"init_args": {"lr": 8e-3, "lr_reference_length": 64}}},
            "finetune": {"trainer": {"max_steps": 60, "max_epochs": 2},
                         "model": {"init_args": {"lr": 4e-3, "lr_reference_length": 64}},
                         "data": {"init_args": {"finetune_bases": 2048}}},
        },
        synthetic={"chrom_length": 40_000, "order": 2, "concentration": 3.0, "seed": 0},
    ),
}


def matched_bidirectional_width(causal_width: int, **overrides: Any) -> int:
    """The largest width whose bidirectional Mamba-s6 has no more parameters than the causal one; overrides:
    the models' other settings (`seqssm.models.model_config`: vocab_size, n_classes, n_layers, ...).

    Table 6's rule (d=116 -> 107 on IMDB; 106 with the species task's 12 tokens and 5 classes); the
    thesis preset keeps table 6's 107, presets with other widths use this."""
    from seqssm.models import SequenceModel, model_config
    from seqssm.models.surgery import count_parameters

    causal = model_config("mamba-s6", **{**overrides, "d_model": causal_width})
    budget = count_parameters(SequenceModel(causal))
    for width in range(causal_width, 0, -1):
        if count_parameters(SequenceModel(causal.replace(d_model=width, bidirectional=True))) <= budget:
            return width
    raise StudyError(f"no bidirectional width fits the parameter count of the causal model at d={causal_width}")


class SpeciesStudy:
    """Runs the grid of one preset under `out`; `run()` returns the collected results."""

    def __init__(self, out: str | Path, data_dir: str | Path | None = None, preset: str = "thesis",
                 lengths: list[int] | None = None, arms: list[str] | None = None, recipes: str | Path = RECIPES,
                 f1_width: str = "bidirectional", log: Callable[[str], None] = print):
        if preset not in PRESETS:
            raise StudyError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
        if f1_width not in F1_WIDTHS:
            raise StudyError(f"f1_width must be one of {F1_WIDTHS}, got {f1_width!r}")
        self.f1_width = f1_width
        self.preset_name, self.preset = preset, PRESETS[preset]
        self.out = Path(out)
        self.lengths = list(lengths or self.preset.lengths)
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in self.lengths):
            raise StudyError(f"lengths (--lengths) must be integers >= 1, got {self.lengths}")
        self.arms = list(arms or ARMS)
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown:
            raise StudyError(f"unknown arms {unknown}; choose from {list(ARMS)}")
        if data_dir is None:
            if self.preset.synthetic is None:
                raise StudyError(f"preset {preset!r} reads real genomes: give --data-dir (layout <dir>/<species>/"
                                 "chr<C>.fna; see seqssm.data.species)")
            data_dir = self.out / "genomes"
        self.data_dir = Path(data_dir)
        self.recipes, self.log = Path(recipes), log
        self.widths = self._widths()

    # -- settings --------------------------------------------------------------------------------
    def _recipe(self, name: str) -> dict:
        path = self.recipes / name
        if not path.is_file():
            raise StudyError(f"recipe {path} not found; pass --recipes DIR (a folder like seqssm/recipes/species)")
        return read_recipe(path)

    def _widths(self) -> dict[str, int]:
        from seqssm.models import model_config

        widths = dict(self.preset.widths or {})
        widths.setdefault("causal", model_config("mamba-s6").d_model)
        if widths.get("bidirectional") is None:
            if self.preset.widths is None:
                widths["bidirectional"] = model_config("mamba-s6-bi").d_model
            else:
                from seqssm.data.species import DEFAULT_SPECIES
                from seqssm.data.tokenizers import DNATokenizer

                config = self._config("finetune", FINETUNE_RECIPE)
                overrides = config["model"]["init_args"].get("model_overrides", {})
                shape = {k: v for k, v in overrides.items() if k not in ("d_model", "dropout")}
                n_classes = len(config["data"]["init_args"].get("species") or DEFAULT_SPECIES)
                widths["bidirectional"] = matched_bidirectional_width(
                    widths["causal"], vocab_size=DNATokenizer().vocab_size, n_classes=n_classes, **shape)
        widths["f1"] = widths[self.f1_width]
        return widths

    def stage(self, name: str) -> str:
        """The pretraining stage that `name` runs as: the first of PRETRAINING with the same recipe, width and parent
        ("ntp" for "ntp-f1" when F1 pretrains at the causal width), so that no run is made twice."""
        spec = PRETRAINING[name]
        key = (spec.recipe, self.widths[spec.width], spec.init_from and self.stage(spec.init_from))
        return next(other for other, o in PRETRAINING.items()
                    if (o.recipe, self.widths[o.width], o.init_from and self.stage(o.init_from)) == key)

    def _config(self, kind: str, recipe: str) -> dict:
        config = self._recipe(recipe)
        for part in (self.preset.overrides.get("all", {}), self.preset.overrides.get(kind, {})):
            config = merge(config, part)
        return config

    def run_config(self, kind: str, recipe: str, length: int, run_dir: Path, model: dict) -> dict:
        """The full `seqssm fit` config of one stage: recipe + preset + this length, folder and model."""
        config = self._config(kind, recipe)
        trainer = config["trainer"]
        batch = config["data"]["init_args"]["batch_size"]
        # one epoch per validation: the recipe's max_steps split evenly over its max_epochs
        steps_per_epoch = math.ceil(trainer["max_steps"] / trainer["max_epochs"])
        return merge(config, {
            "trainer": {"default_root_dir": str(run_dir), "enable_progress_bar": False,
                        "enable_model_summary": False, "num_sanity_val_steps": 0},
            "model": {"init_args": model},
            "data": {"init_args": {"data_dir": str(self.data_dir), "max_length": length, "batch_size": batch,
                                   "train_size": batch * steps_per_epoch}},
        })

    def _model(self, config_model: dict, name: str, width: str, **init: Any) -> dict:
        overrides = dict(config_model.get("model_overrides") or {})
        overrides["d_model"] = self.widths[width]
        return {"model": name, "model_overrides": overrides, **init}

    # -- running ---------------------------------------------------------------------------------
    def _done(self, run_dir: Path, config: dict) -> dict | None:
        return finished_record(run_dir, config, StudyError)

    def _fit(self, name: str, run_dir: Path, config: dict) -> dict:
        done = self._done(run_dir, config)
        if done is not None:
            self.log(f"[study] {name}: done before, skipped ({run_dir / RESULT})")
            return done
        self.log(f"[study] {name}: fitting{restart_note(run_dir)} -> {run_dir}")
        cli, clock = fit_in_folder(run_dir, config)
        task = cli.model
        metric = f"val_{task.metric_name}"
        last = run_dir / "checkpoints" / "last.ckpt"
        checkpoint = cli.trainer.checkpoint_callback
        best = checkpoint.best_model_score if checkpoint is not None else None
        result = {
            "stage": name, "task": type(task).__name__, "config": config,
            "metrics": {k: float(v) for k, v in cli.trainer.callback_metrics.items()},
            "final": float(cli.trainer.callback_metrics[metric]), "metric": metric,
            "best": None if best is None else float(best),
            "steps": cli.trainer.global_step, "lr": float(task.peak_lr),
            "fit_s": round(clock.fit_s, 2), "step_s": round(clock.step_s, 2),
            "median_step_s": round(clock.median_step_s, 5),
            "n_params": sum(p.numel() for p in task.model.parameters()),
            "checkpoint": str(last), "provenance": getattr(task.model, "provenance", None),
        }
        write_record(run_dir, result)
        self.log(f"[study] {name}: {metric} {result['final']:.4f} in {result['fit_s']:.0f}s")
        return result

    def pretrain(self, stage: str, length: int) -> dict:
        """Run (or find) pretraining `stage` at `length`, after the stage it starts from."""
        stage = self.stage(stage)
        spec = PRETRAINING[stage]
        init = {}
        if spec.init_from is not None:
            init = {"init_from": self.pretrain(spec.init_from, length)["checkpoint"]}
        run_dir = self.out / str(length) / "pretrain" / stage
        base = self._config("pretrain", spec.recipe)["model"]["init_args"]
        model = self._model(base, base["model"], spec.width, **init)
        return self._fit(f"{length}/pretrain/{stage}", run_dir, self.run_config("pretrain", spec.recipe, length,
                                                                               run_dir, model))

    def surgery(self, name: str, length: int) -> dict:
        """Make (or find) the surgery folder `name` at `length` from its pretrained parents."""
        from seqssm.models import SequenceModel, surgery
        from seqssm.models.hub import save_pretrained

        operation, stages = SURGERIES[name]
        stages = tuple(self.stage(stage) for stage in stages)
        parents = [self.pretrain(stage, length)["checkpoint"] for stage in stages]
        run_dir = self.out / str(length) / "surgery" / name
        config = {"operation": operation, "parents": dict(zip(stages, parents))}
        done = self._done(run_dir, config)
        if done is not None:
            return done
        model = getattr(surgery, operation)(*parents)
        folder = save_pretrained(model, run_dir / "model")
        native = SequenceModel(model.config.replace(bidirectional=True))
        result = {"stage": f"{length}/surgery/{name}", "config": config, "folder": str(folder),
                  "n_params": surgery.count_parameters(model),
                  "native_bidirectional_n_params": surgery.count_parameters(native),
                  "provenance": model.provenance}
        write_record(run_dir, result)
        self.log(f"[study] {length}/surgery/{name}: {operation}({', '.join(stages)}) -> {folder}")
        return result

    def finetune(self, arm: str, length: int) -> dict:
        """Run (or find) finetuning arm `arm` at `length`, after whatever it starts from."""
        spec = ARMS[arm]
        init = {}
        if spec.pretrain is not None:
            init = {"init_from": self.pretrain(spec.pretrain, length)["checkpoint"]}
        elif spec.surgery is not None:
            init = {"init_from": self.surgery(spec.surgery, length)["folder"]}
        if init:
            init["reinit_head"] = True  # language-model head -> a new species classifier
        base = self._config("finetune", FINETUNE_RECIPE)["model"]["init_args"]
        name = "mamba-s6-bi" if spec.bidirectional else "mamba-s6"
        run_dir = self.out / str(length) / arm
        model = self._model(base, name, spec.width, **init)
        return self._fit(f"{length}/{arm}", run_dir, self.run_config("finetune", FINETUNE_RECIPE, length, run_dir,
                                                                     model))

    def prepare_data(self) -> None:
        """Write the preset's synthetic genomes into the data folder if it has none."""
        if self.preset.synthetic is None:
            return
        species = self._config("finetune", FINETUNE_RECIPE)["data"]["init_args"].get("species")
        from seqssm.data.species import DEFAULT_SPECIES
        from seqssm.data.generators.genome import write_genomes

        species = list(species or DEFAULT_SPECIES)
        absent = [s for s in species if not (self.data_dir / s).is_dir()]
        if absent:
            self.log(f"[study] writing synthetic genomes for {absent} into {self.data_dir}")
            write_genomes(self.data_dir, absent, **self.preset.synthetic)

    def run(self) -> dict:
        """Every stage each chosen arm needs, at every length (shortest first), then the report."""
        from .report import write_report

        self.prepare_data()
        results: dict[str, dict[str, dict]] = {"finetune": {}, "pretrain": {}, "surgery": {}}
        for length in self.lengths:
            for arm in self.arms:
                results["finetune"].setdefault(arm, {})[str(length)] = self.finetune(arm, length)
            for stage in PRETRAINING:
                path = self.out / str(length) / "pretrain" / stage / RESULT
                if path.is_file():
                    results["pretrain"].setdefault(stage, {})[str(length)] = json.loads(path.read_text())
            for name in SURGERIES:
                path = self.out / str(length) / "surgery" / name / RESULT
                if path.is_file():
                    results["surgery"].setdefault(name, {})[str(length)] = json.loads(path.read_text())
        kinds = {arm: {"bidirectional": ARMS[arm].bidirectional,
                       "pretrained": ARMS[arm].pretrain is not None or ARMS[arm].surgery is not None}
                 for arm in self.arms}
        summary = {"preset": self.preset_name, "lengths": self.lengths, "arms": self.arms, "arm_kinds": kinds,
                   "widths": self.widths, "f1_width": self.f1_width,
                   "arm_widths": {arm: self.widths[ARMS[arm].width] for arm in self.arms},
                   "data_dir": str(self.data_dir), **results}
        write_report(summary, self.out)
        return summary
