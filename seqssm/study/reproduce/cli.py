"""`seqssm reproduce CLAIM|all|list|index`: the command line of the reproductions."""

from __future__ import annotations

from pathlib import Path

from seqssm.arguments import ArgumentParser

from . import CLAIMS
from .claim import RECIPES, SCALES, Settings


def parser() -> ArgumentParser:
    """The `seqssm reproduce` argument parser."""
    p = ArgumentParser(prog="seqssm reproduce", description="Re-run a source paper's comparison in "
                                "miniature with several seeds; write results.json, report.md and figures with a "
                                "verdict per comparison. Finished runs are skipped on a second call.")
    p.add_argument("claim", choices=[*CLAIMS, "all", "list", "index"],
                   help="a claim, `all` of them, `list` them, or `index`: rebuild <out>/report.md from the claims "
                        "already reported there (runs nothing)")
    p.add_argument("--seeds", type=int, default=None,
                   help="seeds per arm (default: the number the claim's claim.yaml declares for 80%% power)")
    p.add_argument("--out", type=Path, default=Path("runs/reproduce"), help="results folder (default runs/reproduce)")
    p.add_argument("--budget", type=float, default=1.0,
                   help="factor on the two budgets each claim.yaml declares (default 1: as declared; any other value "
                        "is marked in the report as not the declared budget)")
    p.add_argument("--scale", choices=SCALES, default="mini",
                   help="mini: this machine's miniature (default); full: the source's settings (full.yaml), on a GPU")
    p.add_argument("--jobs", type=int, default=2, help="runs side by side, one thread each (default 2)")
    p.add_argument("--smoke", action="store_true", help="the claims' smoke.yaml sizes: seconds, for tests")
    p.add_argument("--recipes", type=Path, default=RECIPES, help="folder of the claims' recipes")
    p.add_argument("--no-bars", action="store_true", help="no progress bars (logs only)")
    return p


def main(argv: list[str]) -> list[dict]:
    """Run the claims that argv names -> their summaries; print each verdict and where its report is."""
    from .report import require_matplotlib
    from .runner import run_all, run_claim

    ns = parser().parse_args(argv)
    if ns.claim == "list":
        from .report import full_scale_estimate

        for name, cls in CLAIMS.items():
            claim = cls(Settings(out=ns.out, recipes=ns.recipes))
            d = claim.declaration
            hours, _ = full_scale_estimate(claim)
            print(f"{name:20s} {cls.title} ({cls.source})\n{'':20s} {d.seeds} seeds (power {d.power():.2f} at the "
                  f"declared effect), {d.budget_text()}; --scale full: about {hours:.1f} h on one H100")
        return []
    if ns.claim == "index":
        from .report import reported, write_index

        claims, summaries = reported([cls(Settings(out=ns.out, recipes=ns.recipes)) for cls in CLAIMS.values()])
        print(f"[reproduce] index of {', '.join(c.name for c in claims)}: {write_index(claims, summaries)}")
        return summaries
    require_matplotlib()
    settings = Settings(out=ns.out, seeds=ns.seeds, budget=ns.budget, smoke=ns.smoke, jobs=ns.jobs,
                        recipes=ns.recipes, scale=ns.scale)
    if ns.claim == "all":
        return run_all([cls(settings) for cls in CLAIMS.values()], bars=not ns.no_bars)
    return [run_claim(CLAIMS[ns.claim](settings), bars=not ns.no_bars)]
