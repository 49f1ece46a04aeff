"""The RL errors a user can cause and fix: `seqssm rl` / `rl-eval` print them as one line (exit code 2)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A run's configuration is invalid: the message names the option, the value given and what is valid."""


class CheckpointError(ValueError):
    """A file is not a readable seqssm RL agent checkpoint: the message names the file and the problem."""
