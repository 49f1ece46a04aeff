"""`seqssm reproduce`: the source papers' headline comparisons in miniature, at the budget and seeds each claim
declares (its verdict checked again at a second budget), with a report (every seed's value, the differences with 95% intervals and p-values, a verdict per declared
comparison, the preconditions of the stand-in, the full-scale plan) and figures.

    seqssm reproduce list
    seqssm reproduce repeat-previous --out runs/reproduce
    seqssm reproduce all --out runs/reproduce
    seqssm reproduce memory-length --scale full      # the source's settings, on a GPU

One module per family of claims (rl_claims, lra_claims, species_claim), one statistics module (stats.py), one shared
runner (runner.py) and report writer (report.py); the sizes, budgets and comparisons are in
seqssm/recipes/reproduce/<claim>/ (claim.yaml declares what is compared). `CLAIMS` is the one list of claims:
`seqssm reproduce` (its choices, `list` and `all`), the tests and scripts/full_scale_step_time.py read it.
"""

from seqssm.errors import ReproduceError

from .claim import Claim, Settings
from .lra_claims import BidirectionalClaim, BidirectionalReplication, RopeClaim
from .rl_claims import BestArm, MemoryCorridor, MemoryLength, RepeatPrevious
from .species_claim import SpeciesPretraining


def by_name(*claims: type[Claim]) -> dict[str, type[Claim]]:
    """Claim classes by their `name`, in the order given (the order of `list`, `all` and the index report)."""
    named = {cls.name: cls for cls in claims}
    if len(named) != len(claims) or "" in named:
        raise ReproduceError(f"every claim needs a name of its own: {[cls.name for cls in claims]}")
    return named


# A new claim is its Claim subclass (name, arms, metrics, ...), its entry here and its recipes' folder
# seqssm/recipes/reproduce/<name>/.
CLAIMS: dict[str, type[Claim]] = by_name(RepeatPrevious, MemoryCorridor, BestArm, MemoryLength, RopeClaim,
                                         BidirectionalClaim, BidirectionalReplication, SpeciesPretraining)

__all__ = ["CLAIMS", "Claim", "ReproduceError", "Settings"]
