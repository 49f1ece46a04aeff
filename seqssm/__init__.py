"""seqssm: deep state space sequence models (S4, S4D, S6/Mamba, S5, ...) in PyTorch."""

__version__ = "0.1.0"
