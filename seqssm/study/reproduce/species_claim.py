"""The limited-finetuning claim of Ulbaek 2024 thesis, 16.6 and 16.7.2: with scarce labels, pretraining
helps, F1 (causal NTP pretraining, then `seqssm.models.surgery.to_bidirectional`) comes close to MLM pretraining
of the bidirectional model at about half its pretraining time, and NTP (causal) falls below both.

On synthetic genomes whose species signal is laid by `seqssm.data.generators.species_context` (genomes.yaml's
`structure.kind`: "selector", blocks of every key motif in a random order then a selector naming the slot that
counts, which a reader resolves from a motif's right-hand context; or "pairs", ordered motif pairs across a gap,
which a causal reader resolves at the second motif). The report prints what a perfect reader (the oracle) and a
4-mer nearest-centroid classifier fitted on the same finetuning bases reach, and the claim's precondition on
pretraining: NTP lowers the perplexity below the best count model of genomes.yaml's `count_model_orders` (5 to 11
bases: beating the background chain's own order, 4-mers, shows local statistics learned, not the motif structure
the species signal lives in); claim.yaml adds the "learned" one on finetuning. Each stage is a
`seqssm fit` config from seqssm/recipes/reproduce/species/ on `seqssm.data.SpeciesDataModule`'s thesis split:
pretraining on every training chromosome but the finetuning one, finetuning on the first `finetune_bases` of one
chromosome per species. The runs are those of the arms claim.yaml names; a finetuning arm needs its pretraining stage
among them.
"""

from __future__ import annotations

import math
from dataclasses import astuple
from pathlib import Path

import numpy as np

from seqssm.errors import ReproduceError

from . import plots
from .claim import Claim, Measurements, Metric, Run, Settings, TokenShape
from .lra_claims import THESIS

GENOMES_RECIPE, SCALE_RECIPE = "genomes.yaml", "scale.yaml"
CENTROID_K = 4  # k-mers of the nearest-centroid baseline
# genomes.yaml's structure.kind -> (the species_context class that lays it, what it lays, what the oracle reads)
STRUCTURES = {
    "pairs": ("ContextStructure", "each species' ordered motif pairs", "counts each species' motif pairs"),
    "selector": ("SelectorStructure", "blocks of every key motif in a random order, then a selector naming one slot, "
                 "each species' selector naming its own key's slot", "reads each block's selected key"),
}

# pretraining stage -> (recipe, its label in the table)
PRETRAINING = {
    "pretrain-ntp": "pretrain_ntp.yaml",  # the NTP arm's parent: causal, causal width
    # F1's parent: causal at the bidirectional width (Ulbaek 2024 thesis, 16.7.2)
    "pretrain-ntp-f1": "pretrain_ntp_f1.yaml",
    "pretrain-mlm-bi": "pretrain_mlm_bi.yaml",
}
# finetuning arm -> (recipe, the pretraining stage it starts from, through the F1 surgery or not)
FINETUNING = {
    "regular": ("finetune.yaml", None, False),
    "bidirectional": ("finetune_bi.yaml", None, False),
    "ntp": ("finetune.yaml", "pretrain-ntp", False),
    "mlm-bi": ("finetune_bi.yaml", "pretrain-mlm-bi", False),
    "f1": ("finetune_bi.yaml", "pretrain-ntp-f1", True),
}


def read_fasta(path: Path) -> np.ndarray:
    """The bases of a one-record FASTA file as codes 0-3 (uint8); other letters are dropped."""
    text = b"".join(line.strip() for line in path.read_bytes().splitlines()[1:])
    codes = np.full(256, 255, dtype=np.uint8)
    codes[np.frombuffer(b"ACGT", dtype=np.uint8)] = np.arange(4, dtype=np.uint8)
    out = codes[np.frombuffer(text, dtype=np.uint8)]
    return out[out < 4]


def kmer_perplexity(train: list[np.ndarray], test: list[np.ndarray], order: int = 3) -> float:
    """Per-base perplexity on `test` of an order-`order` count model (add-one smoothing) fitted on `train`: what
    (order + 1)-mer statistics alone predict. Sequences: codes 0-3."""
    counts = np.ones((4**order, 4))
    for seq in train:
        ctx = np.zeros(len(seq) - order, dtype=np.int64)
        for i in range(order):
            ctx = ctx * 4 + seq[i : len(seq) - order + i]
        np.add.at(counts, (ctx, seq[order:]), 1)
    log_p = np.log(counts / counts.sum(axis=1, keepdims=True))
    total, n = 0.0, 0
    for seq in test:
        ctx = np.zeros(len(seq) - order, dtype=np.int64)
        for i in range(order):
            ctx = ctx * 4 + seq[i : len(seq) - order + i]
        total -= log_p[ctx, seq[order:]].sum()
        n += len(seq) - order
    return math.exp(total / n)


def best_count_model(train: list[np.ndarray], test: list[np.ndarray], orders) -> tuple[int, float, dict[int, float]]:
    """(the order of the count model with the lowest perplexity on `test`, that perplexity, every order's) among
    `orders` (context bases), each fitted on `train` by `kmer_perplexity`. Sequences: codes 0-3."""
    perplexities = {int(order): kmer_perplexity(train, test, int(order)) for order in orders}
    if not perplexities:
        raise ValueError("best_count_model: no orders given")
    best = min(perplexities, key=perplexities.get)
    return best, perplexities[best], perplexities


def kmer_profile(window: np.ndarray, k: int = CENTROID_K) -> np.ndarray:
    """(4**k,) k-mer frequencies of a window (codes 0-3)."""
    index = np.zeros(len(window) - k + 1, dtype=np.int64)
    for i in range(k):
        index = index * 4 + window[i : len(window) - k + 1 + i]
    return np.bincount(index, minlength=4**k) / len(index)


def nearest_centroid_accuracy(train: list[list[np.ndarray]], test: list[list[np.ndarray]],
                              k: int = CENTROID_K) -> float:
    """Accuracy on `test` windows (per class, a list) of the classifier that gives each window the class whose mean
    k-mer profile over its `train` windows is nearest (Euclidean): what k-mer statistics alone tell."""
    centroids = np.stack([np.mean([kmer_profile(w, k) for w in windows], axis=0) for windows in train])
    right = [np.argmin(((centroids - kmer_profile(w, k)) ** 2).sum(axis=1)) == c
             for c, windows in enumerate(test) for w in windows]
    return float(np.mean(right))


def windows_of(seq: np.ndarray, length: int) -> list[np.ndarray]:
    """The non-overlapping windows of `length` bases in `seq`."""
    return [seq[i : i + length] for i in range(0, len(seq) - length + 1, length)]


def genome_structure(structure: dict):
    """The species signal genomes.yaml's `structure` declares: its `kind` (a key of STRUCTURES) built from the other
    fields."""
    from seqssm.data.generators import species_context

    fields = dict(structure)
    kind = fields.pop("kind", None)
    if kind not in STRUCTURES:
        raise ReproduceError(f"{GENOMES_RECIPE}: structure.kind must be one of {', '.join(STRUCTURES)}, got {kind!r}")
    return getattr(species_context, STRUCTURES[kind][0])(**fields)


class SpeciesPretraining(Claim):
    name = "species-pretraining"
    title = "Limited finetuning: pretraining helps, F1 close to MLM at half its pretraining time, NTP below both"
    source = f"{THESIS}, 16.6 (fig. 21) and 16.7.2"
    claim = ("finetuning Mamba-S6 on 1M bases of one chromosome per species, MLM-pretrained bidirectional is best "
             "(+19 points over the causal model at 16k), F1 second (+18 points) while pretraining in half the "
             "wall-clock time of the bidirectional MLM model; pretraining and bidirectionality both help, "
             "NTP-pretrained causal falls below both bidirectional pretrained models (fig. 21, one run each). Here on "
             "synthetic genomes whose species are told only by a motif's right-hand context (genomes.yaml).")
    arms = (*FINETUNING, *PRETRAINING)
    metrics = (Metric("acc", "final val. accuracy (finetuning)"), Metric("ppl", "val. perplexity (NTP)"),
               Metric("mlm_acc", "masked-token accuracy (MLM)"), Metric("pretrain_s", "pretraining time (s)", ".0f"),
               Metric("step_ms", "median step (ms)", ".1f"))
    paper_values = {"mlm-bi": {"acc": "best: +19 pt over regular at 16k"},
                    "f1": {"acc": "second: +18 pt over regular at 16k"}, "regular": {"acc": "baseline"}}
    full_scale_tokens = TokenShape(12, 5, 16384)  # the DNA tokenizer's 12 tokens, 5 species, 16k-base windows

    def __init__(self, settings: Settings):
        super().__init__(settings)
        missing = sorted({FINETUNING[a][1] for a in self.arms if a in FINETUNING} - {None} - set(self.arms))
        if missing:
            raise ReproduceError(f"{self.name}: claim.yaml's arms start from pretraining stages it does not run: "
                                 f"{', '.join(missing)}")

    # -- data ------------------------------------------------------------------------------------------------------
    def genome_settings(self) -> dict:
        return self.recipe(GENOMES_RECIPE, part="prepare")

    def data_folder(self) -> Path:
        """<out>/data/context-genomes-<settings>, named by the structure's kind and every field of it (defaults
        included, in the class's order): genomes laid with another structure are never read as these."""
        s = self.genome_settings()
        fields = astuple(genome_structure(s["structure"]))
        tag = "-".join(str(v) for v in (s["chrom_length"], s["order"], s["concentration"], s["seed"],
                                         s["structure"]["kind"], *fields))
        return self.settings.out / "data" / f"context-genomes-{tag}"

    def prepare(self) -> list[str]:
        """Write the genomes unless they are there; the count models' perplexities for the LM check (the best of
        genomes.yaml's `count_model_orders` is its bar); the oracle's and the 4-mer nearest-centroid classifier's
        accuracy on validation windows."""
        from seqssm.data.generators.species_context import write_context_genomes
        from seqssm.data.species import Chromosome
        from seqssm.data.species_splits import DEFAULT_SPECIES, SPECIES_SPLITS
        from seqssm.recipes import merge

        s, folder = self.genome_settings(), self.data_folder()
        structure = genome_structure(s["structure"])
        _, lays, oracle_reads = STRUCTURES[s["structure"]["kind"]]
        if not all((folder / sp).is_dir() for sp in DEFAULT_SPECIES):
            write_context_genomes(folder, DEFAULT_SPECIES, chrom_length=s["chrom_length"], order=s["order"],
                                  concentration=s["concentration"], seed=s["seed"], structure=structure)
        for fasta in sorted(folder.glob("*/chr*.fna")):
            # index every file here, once: runs side by side would otherwise write the same .fai at once
            Chromosome(fasta, fasta.parent.name, fasta.stem)
        chrom = {sp: {part: [read_fasta(folder / sp / f"chr{c}.fna") for c in SPECIES_SPLITS[sp][part]]
                      for part in ("train", "valid")} for sp in DEFAULT_SPECIES}
        # fitted on the pretraining chromosomes (the first is finetuning's); the background chain's own order is
        # reported beside them: what local statistics alone give
        pretrain = [x for sp in chrom.values() for x in sp["train"][1:]]
        valid_chroms = [x for sp in chrom.values() for x in sp["valid"]]
        self.kmer_order, self.kmer_ppl, ppls = best_count_model(pretrain, valid_chroms, s["count_model_orders"])
        chain_ppl = kmer_perplexity(pretrain, valid_chroms, s["order"])
        data = self.smoked(merge(self.read("finetune.yaml"), self.read(SCALE_RECIPE)))["data"]["init_args"]
        length, bases = data["max_length"], data["finetune_bases"]
        train = [windows_of(chrom[sp]["train"][0][:bases], length) for sp in DEFAULT_SPECIES]
        valid = [[w for x in chrom[sp]["valid"] for w in windows_of(x, length)] for sp in DEFAULT_SPECIES]
        self.kmer_acc = nearest_centroid_accuracy(train, valid)
        library = structure.library(s["seed"])
        oracle = [np.argmax(structure.oracle(w, library, len(DEFAULT_SPECIES))) == c
                  for c, windows in enumerate(valid) for w in windows]
        structure_text = ", ".join(f"{k} {v:g}" for k, v in s["structure"].items() if k != "kind")
        return [f"Data: synthetic genomes in {folder}: {s['chrom_length']} bases per chromosome, a shared order-"
                f"{s['order']} background chain (rows ~ Dirichlet({s['concentration']:g})) with {lays} "
                f"({structure_text}).",
                "Count models fitted on the pretraining chromosomes, validation perplexity (uniform: 4.0): "
                + ", ".join(f"{o + 1}-mer {v:.3f}" for o, v in sorted(ppls.items()))
                + f"; at the background chain's own order ({s['order'] + 1}-mers) {chain_ppl:.3f}. NTP pretraining "
                f"must beat the best, the {self.kmer_order + 1}-mer model's {self.kmer_ppl:.3f}.",
                f"Baselines on the {sum(map(len, valid))} validation windows of {length} bases (chance "
                f"{1 / len(DEFAULT_SPECIES):.2f}): the oracle ({oracle_reads}) "
                f"{np.mean(oracle):.3f}; "
                f"a {CENTROID_K}-mer nearest-centroid classifier fitted on the finetuning bases {self.kmer_acc:.3f}."]

    # -- runs ------------------------------------------------------------------------------------------------------
    def fit_config(self, recipe: str, seed: int, arm: str, **init) -> tuple[dict, int]:
        """(the fit config of `recipe` for `arm` (a stage or a finetuning arm) at `seed` on the genomes, its steps),
        validated `validations` times."""
        from seqssm.recipes import merge

        config = self.smoked(merge(self.read(recipe), self.read(SCALE_RECIPE)), arm=arm)
        validations = config.pop("validations")
        steps = self.scaled(config["trainer"]["max_steps"], validations)
        data = config["data"]["init_args"]
        overrides = {"seed_everything": seed,
                     "trainer": {"max_steps": steps, "val_check_interval": steps // validations,
                                 "check_val_every_n_epoch": None},
                     "model": {"init_args": init},
                     "data": {"init_args": {"data_dir": str(self.data_folder()),
                                            "train_size": data["batch_size"] * steps}}}
        return merge(config, overrides), steps

    def runs(self) -> list[Run]:
        runs = []
        for seed in self.seeds():
            checkpoint = {}
            for stage, recipe in PRETRAINING.items():
                if stage in self.arms:
                    key = f"{stage}/seed{seed}"
                    config, steps = self.fit_config(recipe, seed, stage)
                    runs.append(Run(key, stage, seed, "fit", config, steps))
                    checkpoint[stage] = str(self.folder / key / "checkpoints" / "last.ckpt")
            surgery_key = f"surgery-f1/seed{seed}"
            if "f1" in self.arms:
                runs.append(Run(surgery_key, "f1", seed, "surgery", {"operation": "to_bidirectional",
                                "parents": [checkpoint["pretrain-ntp-f1"]]}, 0, (f"pretrain-ntp-f1/seed{seed}",)))
            for arm, (recipe, parent, surgery) in FINETUNING.items():
                if arm not in self.arms:
                    continue
                init, needs = {}, ()
                if surgery:
                    init = {"init_from": str(self.folder / surgery_key / "model"), "reinit_head": True}
                    needs = (surgery_key,)
                elif parent is not None:
                    init, needs = {"init_from": checkpoint[parent], "reinit_head": True}, (f"{parent}/seed{seed}",)
                config, steps = self.fit_config(recipe, seed, arm, **init)
                runs.append(Run(f"{arm}/seed{seed}", arm, seed, "fit", config, steps, needs))
        return runs

    # -- results ---------------------------------------------------------------------------------------------------
    def measure(self, records, at=1.0):
        """Read before the end (`at` < 1), the finetuning arms' accuracy at that fraction of their finetuning, after
        the whole pretraining they start from; the pretraining stages and their precondition only at the end."""
        m = Measurements()
        for arm in self.arms:
            results = self.results(records, arm)
            for r in results:
                if arm in PRETRAINING:
                    if at == 1:
                        m.add(arm, "ppl" if r["metric"] == "val_ppl" else "mlm_acc", r["final"])
                        m.add(arm, "pretrain_s", r["fit_s"])
                        m.add(arm, "step_ms", 1000 * r["median_step_s"])
                    continue
                seen = [c["val_acc"] for c in r["curve"] if c["step"] <= at * r["steps"]]
                m.add(arm, "acc", r["final"] if at == 1 else seen[-1] if seen else None)
                if at == 1:
                    m.add(arm, "step_ms", 1000 * r["median_step_s"])
            if results and arm in FINETUNING:
                m.curves[arm] = ([c["step"] for c in results[0]["curve"]],
                                 [[c["val_acc"] for c in r["curve"]] for r in results])
        ppl = m.values.get("pretrain-ntp", {}).get("ppl")
        kmer_ppl, kmer_order = getattr(self, "kmer_ppl", math.nan), getattr(self, "kmer_order", None)
        if ppl:
            bar = "count model" if kmer_order is None else f"{kmer_order + 1}-mer count model"
            m.preconditions.append((f"NTP pretraining learns more than local base statistics: validation perplexity "
                                    f"{np.mean(ppl):.3f} (worst seed {max(ppl):.3f}) below the best count model's "
                                    f"(the {bar}, {kmer_ppl:.3f}) in every seed", max(ppl) < kmer_ppl))
        return m

    def plot(self, m, folder):
        plt = plots.pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        finetuned = {a: m.values.get(a, {}).get("acc", []) for a in FINETUNING if a in self.arms}
        order = sorted(finetuned, key=lambda a: -np.mean(finetuned[a]) if finetuned[a] else 0)
        plots.bars(left, {a: finetuned[a] for a in order}, "final validation accuracy")
        left.set_title("limited finetuning, best first (cf. fig. 21)")
        left.set_ylim(bottom=0)
        plots.curves(right, m.curves, "finetuning steps", "validation accuracy")
        right.set_title("finetuning curves")
        return [plots.save(fig, folder / "species_pretraining.png")]
