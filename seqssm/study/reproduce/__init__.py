"""`seqssm reproduce`: the source papers' headline comparisons in miniature, at two budgets and the seeds each claim
declares, with a report (every seed's value, the differences with 95% intervals and p-values, a verdict per declared
comparison, the preconditions of the stand-in, the full-scale plan) and figures.

    seqssm reproduce list
    seqssm reproduce repeat-previous --out runs/reproduce
    seqssm reproduce all --out runs/reproduce
    seqssm reproduce memory-length --scale full      # the source's settings, on a GPU

One module per family of claims (rl_claims, lra_claims, species_claim), one statistics module (stats.py), one shared
runner (runner.py) and report writer (report.py); the sizes, budgets and comparisons are in
seqssm/recipes/reproduce/<claim>/ (claim.yaml declares what is compared).
"""

from seqssm.errors import ReproduceError

from .claim import Claim, Settings
from .lra_claims import LRA_CLAIMS
from .rl_claims import RL_CLAIMS
from .species_claim import SpeciesPretraining

CLAIMS: dict[str, type[Claim]] = {cls.name: cls for cls in (*RL_CLAIMS, *LRA_CLAIMS, SpeciesPretraining)}

__all__ = ["CLAIMS", "Claim", "ReproduceError", "Settings"]
