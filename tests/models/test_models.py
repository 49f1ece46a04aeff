"""SequenceModel and the registry: shapes, padding, recurrence, generation, config round trip."""

import json

import pytest
import torch

from seqssm.layers import S5
from seqssm.models import SequenceModel, SequenceModelConfig, build, sample_next
from seqssm.testing import check_layer_contract

TINY = dict(d_model=8, n_layers=2, d_state=4, dropout=0.0)


def tiny(name="mamba-s6", **kw):
    return build(name, **{**TINY, **kw}).double().eval()


# --- shapes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("pooling", ["mean", "last", "cls"])
def test_classifier_shapes(pooling):
    m = tiny(vocab_size=11, n_classes=3, pooling=pooling)
    assert m(torch.randint(0, 11, (4, 9))).shape == (4, 3)
    m = tiny("simple-s4d", d_input=2, n_classes=5, pooling=pooling)
    assert m(torch.randn(4, 9, 2, dtype=torch.float64)).shape == (4, 5)


def test_per_token_and_lm_shapes_and_features():
    ids = torch.randint(0, 11, (2, 7))
    assert tiny(vocab_size=11, n_classes=3, pooling=None)(ids).shape == (2, 7, 3)
    lm = tiny(vocab_size=11, pad_vocab_size_multiple=8)
    assert lm.embedding.num_embeddings == 16 and lm(ids).shape == (2, 7, 11)
    assert lm.features(ids).shape == (2, 7, 8)
    torch.testing.assert_close(lm.backbone(lm.embed(ids)), lm.features(ids))


def test_tied_embeddings_share_one_tensor():
    lm = tiny(vocab_size=11, tie_embeddings=True, pad_vocab_size_multiple=4)
    assert lm.head.weight is lm.embedding.weight
    untied = tiny(vocab_size=11, pad_vocab_size_multiple=4)
    n = sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in lm.parameters())
    assert n == 12 * 8  # the untied head: one row per padded vocabulary entry
    with pytest.raises(ValueError, match="tie_embeddings"):
        tiny(vocab_size=11, n_classes=2, tie_embeddings=True)


def test_argument_checks():
    with pytest.raises(ValueError, match="exactly one"):
        SequenceModel(SequenceModelConfig(8, vocab_size=4, d_input=2, n_classes=2))
    with pytest.raises(ValueError, match="n_classes"):
        SequenceModel(SequenceModelConfig(8, vocab_size=4))
    with pytest.raises(ValueError, match="vocab_size"):
        SequenceModel(SequenceModelConfig(8, d_input=3, pooling=None))
    with pytest.raises(ValueError, match="unknown pooling 'max'"):
        SequenceModelConfig(8, d_input=3, n_classes=2, pooling="max")
    with pytest.raises(TypeError, match="SequenceModel.from_config reads dicts"):
        SequenceModel({"d_model": 8, "d_input": 3, "n_classes": 2})


# --- padding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mamba-s6", "mamba-s6-bi", "mamba-s4d-bi", "simple-s4d"])
@pytest.mark.parametrize("pooling", ["mean", "last", "cls", None])
def test_right_padding_does_not_change_results(name, pooling):
    m = tiny(name, vocab_size=11, n_classes=3, pooling=pooling)
    ids = torch.randint(0, 11, (3, 10))
    lengths = torch.tensor([4, 10, 7])
    out = m(ids, lengths=lengths)
    for b in range(3):
        alone = m(ids[b : b + 1, : lengths[b]])
        torch.testing.assert_close(out[b : b + 1] if pooling else out[b : b + 1, : lengths[b]], alone)
    junk = ids.clone()
    junk[0, 4:] = torch.randint(0, 11, (6,))
    junk_out = m(junk, lengths=lengths)
    torch.testing.assert_close(junk_out[0] if pooling else junk_out[0, :4], out[0] if pooling else out[0, :4])
    mask = torch.arange(10) < lengths[:, None]
    torch.testing.assert_close(m(ids, mask=mask), out)
    feats = m.features(ids, lengths=lengths)
    torch.testing.assert_close(feats[:1, :4], m.features(ids[:1, :4]))


def test_mask_must_be_right_padding():
    m = tiny(vocab_size=11, n_classes=3)
    with pytest.raises(ValueError, match="right-padded"):
        m(torch.randint(0, 11, (1, 4)), mask=torch.tensor([[True, False, True, True]]))


# --- recurrence -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mamba-s6", "mamba-s4d-rope", "mamba-s6-placebo", "simple-s4d"])
def test_causal_models_obey_the_layer_contract(name):
    m = tiny(name, d_input=3, n_classes=4, pooling=None)
    check_layer_contract(m, 3)
    check_layer_contract(m.backbone, 8)


def test_token_model_scan_and_step_match_forward():
    m = tiny("mamba-s4d", vocab_size=11)
    ids = torch.randint(0, 11, (2, 9))
    logits = m(ids)
    scanned, state = m.scan(ids)
    torch.testing.assert_close(scanned, logits)
    state, outs = m.initial_state(2), []
    for t in range(9):
        out, state = m.step(ids[:, t], state)
        outs.append(out)
    torch.testing.assert_close(torch.stack(outs, 1), logits)


def test_bidirectional_model_has_no_recurrence():
    m = tiny("mamba-s6-bi", vocab_size=11)
    assert not m.causal
    with pytest.raises(NotImplementedError, match="bidirectional"):
        m.scan(torch.randint(0, 11, (1, 3)))
    with pytest.raises(ValueError, match="causal"):
        m.generate(torch.randint(0, 11, (1, 3)), 2)


# --- generation -------------------------------------------------------------------------------


def _generate_by_recomputing(m, ids, n, temperature, top_k, generator):
    for _ in range(n):
        nxt = sample_next(m(ids)[:, -1], temperature, top_k, generator)
        ids = torch.cat([ids, nxt[:, None]], 1)
    return ids


@pytest.mark.parametrize("name", ["mamba-s6", "simple-s4d", "mamba-s6-rope"])
@pytest.mark.parametrize("temperature,top_k", [(0.0, None), (1.0, None), (0.8, 5)])
def test_generation_with_the_cache_equals_recomputing(name, temperature, top_k):
    m = tiny(name, vocab_size=13)
    prompt = torch.randint(0, 13, (2, 5))
    cached = m.generate(prompt, 8, temperature, top_k, generator=torch.Generator().manual_seed(3))
    full = _generate_by_recomputing(m, prompt, 8, temperature, top_k, torch.Generator().manual_seed(3))
    assert cached.shape == (2, 13) and torch.equal(cached[:, :5], prompt)
    assert torch.equal(cached, full)


def test_generation_state_size_is_independent_of_length():
    m = tiny(vocab_size=13)

    def numel(state):
        return sum(numel(s) for s in state) if isinstance(state, tuple) else state.numel()

    sizes = {numel(m.scan(torch.randint(0, 13, (1, n)))[1]) for n in (3, 40)}
    assert len(sizes) == 1


def test_top_k_keeps_only_the_k_largest():
    logits = torch.tensor([[0.0, 5.0, 4.0, -1.0]])
    draws = {sample_next(logits, 1.0, 2, torch.Generator().manual_seed(i)).item() for i in range(50)}
    assert draws == {1, 2}


# --- config and registry ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mamba-s6-bi-rope", "simple-s4", "mamba-s4d-placebo"])
def test_config_round_trip(name):
    m = tiny(name, vocab_size=11, n_classes=2, rope={"base": 10, "trainable": True, "targets": ("x",)} if "rope" in name else None)
    config = json.loads(json.dumps(m.config.to_dict()))
    again = SequenceModel.from_config(config).double().eval()
    again.load_state_dict(m.state_dict())
    ids = torch.randint(0, 11, (2, 6))
    torch.testing.assert_close(again(ids), m(ids))
    assert again.config == m.config


def test_registry_defaults_and_names():
    m = build("mamba-s6", vocab_size=256, n_classes=2)
    c = m.config
    assert (c.d_model, c.n_layers, c.block.ssp.d_state, c.block.dropout, c.pooling) == (116, 6, 16, 0.1, "mean")
    assert build("simple-s4d", d_input=3, n_classes=10).config.block.ssp.d_state == 64
    assert build("mamba-s4d-bi", vocab_size=256, n_classes=2).config.block.bidirectional
    assert build("mamba-s6-rope", vocab_size=256).config.pooling is None
    for bad in ("mamba-s7", "mamba-s6-bi-sm", "mamba-s6-xx", "simple-s4d-bi", "mamba-s4-sm"):
        with pytest.raises(ValueError):
            build(bad, vocab_size=4, n_classes=2)
    with pytest.raises(ValueError, match="s4, s4d, s6, s5"):  # the error lists the registered layers
        build("mamba-s7", vocab_size=4, n_classes=2)
    # Any registered layer fills a block, by the same name it has for the RL cores.
    assert isinstance(build("mamba-s5", vocab_size=4, n_classes=2, d_model=8, n_layers=1).backbone.layers[0]
                      .branches[0].ssp, S5)
    assert build("mamba-s4-sm", vocab_size=4, n_classes=2, d_model=16, n_layers=1).config.d_model == 16


def test_residual_in_fp32_keeps_the_stream_in_float32():
    m = build("mamba-s6", vocab_size=11, n_classes=2, **TINY, residual_in_fp32=True).to(torch.bfloat16)
    ids = torch.randint(0, 11, (1, 5))
    assert m.backbone.layers[0](m.embed(ids)).dtype == torch.float32
    assert m.features(ids).dtype == torch.bfloat16 and m(ids).dtype == torch.bfloat16
