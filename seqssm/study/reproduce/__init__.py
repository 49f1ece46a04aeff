"""`seqssm reproduce`: the source papers' headline comparisons in miniature, several seeds each, with a report
(mean ± standard error, wall time, the paper's numbers beside ours, a verdict per comparison) and figures.

    seqssm reproduce list
    seqssm reproduce repeat-previous --seeds 3 --out runs/reproduce
    seqssm reproduce all --seeds 3 --out runs/reproduce

One module per family of claims (rl_claims, lra_claims, species_claim), one shared runner (runner.py) and
report writer (report.py); the sizes and budgets are in recipes/reproduce/<claim>/.
"""

from seqssm.errors import ReproduceError

from .claim import Claim, Settings
from .lra_claims import LRA_CLAIMS
from .rl_claims import RL_CLAIMS
from .species_claim import SpeciesPretraining

CLAIMS: dict[str, type[Claim]] = {cls.name: cls for cls in (*RL_CLAIMS, *LRA_CLAIMS, SpeciesPretraining)}

__all__ = ["CLAIMS", "Claim", "ReproduceError", "Settings"]
