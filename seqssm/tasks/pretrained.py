"""Starting a task's network from pretrained weights: copy what fits, with a report of what did not.

The weights are read by `seqssm.models.loading.read_weights` (checkpoints with weights_only=True, folders
and `.safetensors` files with safetensors).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
from torch import nn

from seqssm.errors import IncompatibleWeightsError

log = logging.getLogger(__name__)


@dataclass
class LoadReport:
    """What happened to each key when loading a state dict into a model."""

    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[tuple[str, tuple, tuple]] = field(default_factory=list)  # (key, weights shape, model shape)
    skipped: list[str] = field(default_factory=list)  # deliberately not loaded (re-initialised head)

    @property
    def clean(self) -> bool:
        """True when every model key was loaded or deliberately skipped and nothing was left over."""
        return not (self.missing or self.unexpected or self.mismatched)

    def __str__(self) -> str:
        lines = [f"loaded {len(self.loaded)} tensors"]
        if self.skipped:
            lines.append(f"skipped (re-initialised) {len(self.skipped)}: {', '.join(self.skipped)}")
        if self.missing:
            lines.append(f"missing from the weights ({len(self.missing)}): {', '.join(self.missing)} "
                         "(newly initialised)")
        if self.unexpected:
            lines.append(f"unexpected, not in the model ({len(self.unexpected)}): {', '.join(self.unexpected)} "
                         "(skipped)")
        for key, got, want in self.mismatched:
            lines.append(f"shape mismatch: {key}: weights {list(got)} vs model {list(want)} (skipped; newly "
                         "initialised)")
        return "\n".join(lines)


def load_weights(model: nn.Module, state: dict[str, torch.Tensor], strict: bool = True,
                 skip: frozenset[str] = frozenset(), source: str = "weights") -> LoadReport:
    """Copy matching tensors of `state` into `model` (keys in `skip` are left as initialised).

    With `strict`, any missing, unexpected or shape-mismatched key raises
    `IncompatibleWeightsError` carrying the full report, and nothing is loaded. Otherwise the report is logged
    at WARNING when something did not fit, naming the tensors skipped and those left newly initialised.
    """
    own = model.state_dict()
    report = LoadReport()
    to_load = {}
    for key, value in state.items():
        if key in skip:
            report.skipped.append(key)
        elif key not in own:
            report.unexpected.append(key)
        elif value.shape != own[key].shape:
            report.mismatched.append((key, tuple(value.shape), tuple(own[key].shape)))
        else:
            to_load[key] = value
    report.missing = [k for k in own if k not in state and k not in skip]
    report.skipped += [k for k in skip if k in own and k not in state]
    if strict and not report.clean:
        raise IncompatibleWeightsError(
            f"cannot load {source} strictly:\n{report}\n"
            "Use matching model settings, `reinit_head: true` when only the head differs, or `init_strict: false` "
            "to load what fits.")
    model.load_state_dict(to_load, strict=False)
    report.loaded = sorted(to_load)
    if not report.clean:  # a partial start changes what trains: shown by default, not at INFO
        log.warning("%s loaded only in part (init_strict: false): the weights' unexpected and mismatched tensors "
                    "were skipped, the model's missing ones keep their fresh initialisation:\n%s", source, report)
    return report
