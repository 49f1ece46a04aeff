"""F1 / F1R1 surgery: which tensors come from where, symmetry on palindromes, errors, provenance."""

import json
import re

import pytest
import torch

from seqssm.blocks.common import flip_within_lengths
from seqssm.models import SequenceModel, build
from seqssm.models.hub import save_pretrained
from seqssm.models.surgery import SurgeryError, count_parameters, fuse_f1r1, to_bidirectional

SMALL = dict(vocab_size=12, d_model=16, n_layers=2)
BRANCH = re.compile(r"^backbone\.layers\.(\d+)\.branches\.(\d)\.(.*)$")


def causal(ssp="s6", **kw):
    return build(f"mamba-{ssp}", **{**SMALL, **kw})


@pytest.mark.parametrize("ssp", ["s6", "s4d"])
def test_f1_copies_each_blocks_branch_into_both_branches(ssp):
    source = causal(ssp)
    f1 = to_bidirectional(source)
    src, out = source.state_dict(), f1.state_dict()
    assert f1.config.block.bidirectional and f1.config.d_model == source.config.d_model
    branch_keys = [k for k in out if BRANCH.match(k)]
    # conv1d and every SSP tensor (for S6: x_proj, dt_proj, A_log, D) sit in the branch
    expected = {"conv1d.weight", "conv1d.bias"} | ({"ssp.x_proj.weight", "ssp.dt_proj.weight", "ssp.dt_proj.bias",
                                                      "ssp.A_log", "ssp.D"} if ssp == "s6" else set())
    assert expected <= {BRANCH.match(k).group(3) for k in branch_keys}
    for key in branch_keys:
        layer, _, rest = BRANCH.match(key).groups()
        assert torch.equal(out[key], src[f"backbone.layers.{layer}.branches.0.{rest}"]), key
    for key in out.keys() - set(branch_keys):  # embedding, norms, projections, head: the causal model's
        assert torch.equal(out[key], src[key]), key
    # copies, not shared storage: finetuning may move the two branches apart
    first, second = f1.backbone.layers[0].branches
    assert first.conv1d.weight.data_ptr() != second.conv1d.weight.data_ptr()


def test_f1_parameter_count_equals_native_bidirectional_at_the_same_widths():
    source = build("mamba-s6", vocab_size=12, n_classes=5)  # thesis widths, d=116
    native = build("mamba-s6-bi", vocab_size=12, n_classes=5, d_model=116)
    assert count_parameters(to_bidirectional(source)) == count_parameters(native)
    assert count_parameters(native) > count_parameters(source)


def test_f1_reverse_branch_on_a_palindrome_is_the_flipped_forward_branch():
    f1 = to_bidirectional(causal()).eval()
    half = torch.randint(0, 12, (3, 9))
    tokens = torch.cat([half, half.flip(1)], dim=1)  # palindromes
    block = f1.backbone.layers[0]
    xi, _ = block._project(f1.embed(tokens))
    assert torch.equal(xi, xi.flip(1))
    forward_out = block.branches[0](xi)
    reverse_out = flip_within_lengths(block.branches[1](flip_within_lengths(xi, None)), None)
    torch.testing.assert_close(reverse_out, forward_out.flip(1), rtol=0, atol=1e-6)
    # not vacuous: on a non-palindrome the two differ
    other, _ = block._project(f1.embed(torch.randint(0, 12, (3, 18))))
    assert not torch.allclose(block.branches[1](other.flip(1)).flip(1), block.branches[0](other).flip(1), atol=1e-3)
    # so every block's output, and the whole model's features, are palindromes too
    features = f1.features(tokens)
    torch.testing.assert_close(features, features.flip(1), rtol=0, atol=1e-5)


def test_f1r1_takes_exactly_the_listed_parts_from_each_parent():
    forward, reverse = causal(), causal()
    assert not torch.equal(forward.backbone.layers[0].branches[0].ssp.x_proj.weight,
                           reverse.backbone.layers[0].branches[0].ssp.x_proj.weight)
    fused = fuse_f1r1(forward, reverse).state_dict()
    fwd, rev = forward.state_dict(), reverse.state_dict()
    assert set(fused) == set(fwd) | {k.replace(".branches.0.", ".branches.1.") for k in fwd if BRANCH.match(k)}
    for key, value in fused.items():
        match = BRANCH.match(key)
        if match and match.group(2) == "1":  # reverse branch: conv1d + SSP of the reverse model's block
            assert torch.equal(value, rev[f"backbone.layers.{match.group(1)}.branches.0.{match.group(3)}"]), key
        else:  # forward branch, projections, norms, embedding, head: the forward model
            assert torch.equal(value, fwd[key]), key
            if not torch.equal(fwd[key], rev[key]):
                assert not torch.equal(value, rev[key])


@pytest.mark.parametrize("bad, message", [
    (lambda: build("simple-s4d", **SMALL), "'simple' blocks"),
    (lambda: build("mamba-s6-bi", **SMALL), "already bidirectional"),
    (lambda: build("mamba-s6-placebo", **SMALL), "placebo"),
])
def test_surgery_refuses_models_that_cannot_take_it(bad, message):
    with pytest.raises(SurgeryError, match=message):
        to_bidirectional(bad())
    with pytest.raises(SurgeryError, match=message):
        fuse_f1r1(causal(), bad())


def test_f1r1_names_the_mismatched_widths():
    with pytest.raises(SurgeryError, match=r"d_model: forward 16 vs reverse 24.*d_state: forward 16 vs reverse 8"):
        fuse_f1r1(causal(), causal(d_model=24, d_state=8))
    with pytest.raises(SurgeryError, match=r"n_layers: forward 2 vs reverse 3"):
        fuse_f1r1(causal(), causal(n_layers=3))


def test_provenance_of_surgery_folders(tmp_path):
    forward_dir, reverse_dir = save_pretrained(causal(), tmp_path / "fwd"), save_pretrained(causal(), tmp_path / "rev")
    f1 = to_bidirectional(forward_dir)
    assert f1.provenance == {"operation": "to_bidirectional",
                             "parents": [{"role": "causal", "path": str(forward_dir), "provenance": None}]}
    fused_dir = save_pretrained(fuse_f1r1(forward_dir, reverse_dir), tmp_path / "f1r1")
    record = json.loads((fused_dir / "config.json").read_text())["provenance"]
    assert record["operation"] == "fuse_f1r1"
    assert [(p["role"], p["path"]) for p in record["parents"]] == [("forward", str(forward_dir)),
                                                                   ("reverse", str(reverse_dir))]
    assert SequenceModel.from_pretrained(fused_dir).provenance == record


@pytest.mark.parametrize("ssp", ["s6", "s4d"])
def test_surgery_of_float64_parents_copies_every_tensor_bit_identically(ssp):
    forward, reverse = causal(ssp).double(), causal(ssp).double()
    # values a float32 round trip would change: float64 noise below float32's resolution
    with torch.no_grad():
        for model in (forward, reverse):
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 1e-12)
    fwd, rev = forward.state_dict(), reverse.state_dict()
    assert any(not torch.equal(t, t.float().double()) for t in fwd.values() if t.is_floating_point())
    for result, branch_source in ((to_bidirectional(forward), fwd), (fuse_f1r1(forward, reverse), rev)):
        out = result.state_dict()
        for key, value in out.items():
            match = BRANCH.match(key)
            if match and match.group(2) == "1":
                source = branch_source[f"backbone.layers.{match.group(1)}.branches.0.{match.group(3)}"]
            else:
                source = fwd[key]
            assert value.dtype == source.dtype, key
            assert torch.equal(value, source), key
