"""`seqssm study species ...`: the command line of the species study."""

from __future__ import annotations

from seqssm.arguments import ArgumentParser

from .species import ARMS, F1_WIDTHS, PRESETS, RECIPES, SpeciesStudy


def main(argv: list[str]) -> None:
    """Parse `seqssm study species` arguments, run the study and print its table."""
    parser = ArgumentParser(prog="seqssm study", description="Run a whole study: every pretraining "
                                     "stage, surgery and finetuning arm at every length, with its report.")
    parser.add_argument("study", choices=["species"],
                        help="which study (Ulbaek 2024 thesis, 16: species pretraining and transfer)")
    parser.add_argument("--preset", default="thesis", choices=sorted(PRESETS),
                        help="thesis: the recipes' thesis settings on real genomes; cpu-small: the same grid on "
                             "synthetic genomes, small enough for 2 CPU cores")
    parser.add_argument("--lengths", type=int, nargs="+", help="sequence lengths (default: the preset's)")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), help="finetuning arms (default: all)")
    parser.add_argument("--data-dir", help="genomes, <dir>/<species>/chr<C>.fna (cpu-small: written to "
                                           "<out>/genomes if not given)")
    parser.add_argument("--out", required=True, help="study folder; finished stages in it are not run again")
    parser.add_argument("--recipes", default=str(RECIPES), help="folder of the species recipes")
    parser.add_argument("--f1-width", default="bidirectional", choices=F1_WIDTHS,
                        help="width at which F1 / F1R1 pretrain their causal models: bidirectional (Ulbaek 2024 "
                             "thesis, 16.7.2: after surgery they have the bidirectional arm's parameter count) or "
                             "causal (seqssm's earlier setting: after surgery a bidirectional model at the causal "
                             "width, ~16%% larger)")
    ns = parser.parse_args(argv)
    study = SpeciesStudy(ns.out, data_dir=ns.data_dir, preset=ns.preset, lengths=ns.lengths, arms=ns.arms,
                         recipes=ns.recipes, f1_width=ns.f1_width)
    study.run()
    print((study.out / "results.md").read_text())
