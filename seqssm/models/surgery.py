"""Model surgery for bidirectional pretraining (Ulbaek 2024 thesis, 16.1.1): F1 and F1R1.

- `to_bidirectional(causal)` (F1): the bidirectional Mamba model of the same widths whose reverse
  branch in every block is a copy of that block's conv1d + SSP (for S6 also its x/Δ projections,
  A and D: everything in the branch). Embedding, norms, in/out projections and head are the
  causal model's. NTP pretraining runs on the cheaper causal model; the copy happens once, here.
- `fuse_f1r1(forward, reverse)` (F1R1): the same, but each block's reverse branch comes from a
  second causal model trained on reversed sequences; everything else from the forward model.

Widths are the parents': the result is the bidirectional model at the causal model's d_model. Ulbaek
2024 thesis, 16.7.2: "during pretraining F1 has reduced parameter count: Only by the stage of finetuning when its
SSPs are duplicated does F1 reach the full parameter count prescribed in table 6." So the causal
model that F1 / F1R1 start from is pretrained at the bidirectional model's width (Mamba-s6 at d=107),
and the surgery brings it to Mamba-s6-Bi at d=107, the parameter count of table 6's bidirectional row.
(Surgery on a model at the causal width, d=116, gives Mamba-s6-Bi at d=116: about 16% more parameters
than the parameter-matched arms; `seqssm study species --f1-width causal` runs that setting.)

Every tensor keeps its parent's dtype and value bit for bit (a float64 parent gives a float64 result).

Parents may be given as models or as paths (a seqssm folder or a task's Lightning .ckpt); the
result's `provenance` names the operation and each parent's path and own provenance, and
`save_pretrained` writes it into config.json.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from seqssm.blocks.config import MambaBlockConfig
from seqssm.errors import SurgeryError
from seqssm.models.config import SequenceModelConfig
from seqssm.models.hub import provenance_record
from seqssm.models.loading import model_from_path
from seqssm.models.sequence_model import SequenceModel

# Mamba block settings that shape its conv1d + SSP branch (with the SSP's, and the stack's depth and width): a
# reverse branch can only be taken from a model that agrees with the forward model on all of them.
BRANCH_SHAPE_FIELDS = ("expand", "d_conv", "conv_bias", "dt_rank")
SSP_SHAPE_FIELDS = ("layer", "d_state", "rope", "layer_kwargs")


def branch_shape(config: SequenceModelConfig) -> dict:
    """The settings that shape each block's conv1d + SSP branch, by name."""
    block, ssp = config.block, config.block.ssp
    return {"block": block.kind, "n_layers": config.n_layers, "d_model": config.d_model,
            **{k: getattr(block, k) for k in BRANCH_SHAPE_FIELDS},
            **{f"ssp.{k}": getattr(ssp, k) for k in SSP_SHAPE_FIELDS}}
_FIRST_BRANCH = re.compile(r"^(backbone\.layers\.\d+\.branches\.)0\.")


def _load(source: SequenceModel | str | Path, role: str) -> tuple[SequenceModel, str | None]:
    """(model, path or None) for a model, a seqssm folder or a seqssm task checkpoint."""
    if isinstance(source, SequenceModel):
        return source, None
    if not isinstance(source, (str, Path)):
        raise TypeError(f"{role} model: expected a SequenceModel or a path, got {type(source).__name__}")
    return model_from_path(source, f"{role} model"), str(Path(source))


def _check_causal_mamba(model: SequenceModel, role: str) -> None:
    block = model.config.block
    if not isinstance(block, MambaBlockConfig):
        raise SurgeryError(f"{role} model has {block.kind!r} blocks; the surgery needs Mamba blocks "
                           "(only the Mamba block has the conv1d + SSP branch it copies, Ulbaek 2024 thesis, 15.2.1)")
    if block.bidirectional:
        raise SurgeryError(f"{role} model is already bidirectional (config bidirectional=True); the surgery "
                           "starts from a causal model")
    if block.placebo:
        raise SurgeryError(f"{role} model is a placebo model (two causal branches); the surgery starts from a "
                           "single-branch causal model")


def _assemble(forward: SequenceModel, reverse: SequenceModel) -> SequenceModel:
    """Bidirectional model: everything from `forward`, each block's reverse branch from `reverse`'s branch."""
    target = SequenceModel(forward.config.replace(bidirectional=True))
    state = dict(forward.state_dict())
    for key, value in reverse.state_dict().items():
        match = _FIRST_BRANCH.match(key)
        if match:
            state[match.group(1) + "1." + key[match.end():]] = value.detach().clone()
    # Each tensor of the target takes its source's dtype before the copy, so that nothing is rounded through
    # the dtype the target was built in (float32): a float64 parent gives a bit-identical float64 model.
    target_tensors = dict(target.named_parameters())
    target_tensors.update(target.named_buffers())
    for key, tensor in target_tensors.items():
        if key in state and tensor.dtype != state[key].dtype:
            tensor.data = tensor.data.to(state[key].dtype)
    # strict: every tensor of the bidirectional model is accounted for, nothing is left over
    target.load_state_dict(state)
    return target


def to_bidirectional(model: SequenceModel | str | Path) -> SequenceModel:
    """F1: the bidirectional model whose reverse branches copy the causal model's conv1d + SSP branches."""
    causal, path = _load(model, "causal")
    _check_causal_mamba(causal, "causal")
    result = _assemble(causal, causal)
    result.provenance = provenance_record("to_bidirectional", causal=(path, causal.provenance))
    return result


def fuse_f1r1(forward_model: SequenceModel | str | Path, reverse_model: SequenceModel | str | Path) -> SequenceModel:
    """F1R1: projections, norms, embedding and head from `forward_model`; each block's reverse conv1d + SSP
    from `reverse_model` (a causal model trained on reversed sequences)."""
    forward, forward_path = _load(forward_model, "forward")
    reverse, reverse_path = _load(reverse_model, "reverse")
    _check_causal_mamba(forward, "forward")
    _check_causal_mamba(reverse, "reverse")
    ours, theirs = branch_shape(forward.config), branch_shape(reverse.config)
    differ = [f"{k}: forward {ours[k]!r} vs reverse {theirs[k]!r}" for k in ours if ours[k] != theirs[k]]
    if differ:
        raise SurgeryError("forward and reverse models differ in widths/shape, so the reverse model's branches "
                           "do not fit the forward model's blocks: " + "; ".join(differ))
    result = _assemble(forward, reverse)
    result.provenance = provenance_record(
        "fuse_f1r1",
        forward=(forward_path, forward.provenance),
        reverse=(reverse_path, reverse.provenance),
    )
    return result


def count_parameters(model: torch.nn.Module) -> int:
    """Number of trainable parameters (tied tensors once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
