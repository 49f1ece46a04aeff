"""Bad input to SequenceModel's forward, scan and step (issue 19): token ids and numeric inputs of the wrong
dtype, shape or range are refused naming what was expected; empty in, empty out where an empty output exists."""

import pytest
import torch

from seqssm.models import build
from seqssm.ops.checks import InputDtypeError, InputShapeError

VOCAB, D_INPUT = 11, 3
TINY = dict(d_model=8, n_layers=2, d_state=4, dropout=0.0)


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    return build("mamba-s6", vocab_size=VOCAB, **TINY).eval()


@pytest.fixture(scope="module")
def regressor():
    torch.manual_seed(0)
    return build("simple-s4d", d_input=D_INPUT, n_classes=2, pooling=None, **TINY).eval()


def test_token_ids_of_the_wrong_dtype_shape_or_range(lm):
    with pytest.raises(InputDtypeError, match=r"SequenceModel.forward: inputs must be integer token ids \(batch, L\) "
                                              r"\(torch.long\), got torch.float32"):
        lm(torch.ones(2, 5))
    with pytest.raises(InputShapeError, match=r"SequenceModel.scan: inputs must be token ids \(batch, L\), got shape "
                                              r"\(2, 5, 1\)"):
        lm.scan(torch.ones(2, 5, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=rf"inputs must lie in \[0, vocab_size\) = \[0, {VOCAB}\), "
                                         r"got ids from 0 to 12"):
        lm(torch.tensor([[0, 12]]))
    with pytest.raises(InputShapeError, match=r"SequenceModel.step: input_t must be token ids \(batch,\), got shape "
                                              r"\(2, 1\)"):
        lm.step(torch.ones(2, 1, dtype=torch.long), None)
    with pytest.raises(InputShapeError, match=r"state\[0\]\[0\] must have shape \(2, 16, 3\) .*got \(3, 16, 3\)"):
        lm.step(torch.ones(2, dtype=torch.long), lm.initial_state(3))


def test_numeric_inputs_of_the_wrong_dtype_or_width(regressor):
    with pytest.raises(InputDtypeError, match=r"inputs has dtype torch.int64.*cast to float: inputs.float\(\)"):
        regressor(torch.ones(2, 5, D_INPUT, dtype=torch.long))
    with pytest.raises(InputShapeError, match=rf"inputs must be \(batch, L, d_input\) = \(batch, L, {D_INPUT}\), "
                                              r"got \(2, 5, 4\)"):
        regressor.scan(torch.ones(2, 5, 4))
    with pytest.raises(InputShapeError, match=rf"input_t must be \(batch, d_input\) = \(batch, {D_INPUT}\), "
                                              rf"got \(2, 5, {D_INPUT}\)"):
        regressor.step(torch.ones(2, 5, D_INPUT), None)
    assert regressor(torch.randn(2, 5, D_INPUT, dtype=torch.float64)).shape == (2, 5, 2)


def test_masks_and_lengths(lm):
    ids = torch.randint(0, VOCAB, (2, 5))
    with pytest.raises(InputDtypeError, match=r"mask must be bool .*got torch.float32"):
        lm(ids, mask=torch.ones(2, 5))
    with pytest.raises(InputShapeError, match=r"mask must have shape \(batch, L\) = \(2, 5\), got \(2, 4\)"):
        lm(ids, mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, L\] = \[0, 5\], got values from 2 to 7"):
        lm(ids, lengths=torch.tensor([7, 2]))
    with pytest.raises(InputDtypeError, match=r"resets must be bool"):
        lm.scan(ids, None, resets=torch.zeros(2, 5))
    attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])  # a tokenizer's int64 0/1 mask
    torch.testing.assert_close(lm(ids, mask=attention_mask), lm(ids, lengths=torch.tensor([5, 3])), atol=0, rtol=0)


def test_pooled_models_need_a_token_per_sequence():
    torch.manual_seed(0)
    classifier = build("mamba-s6", vocab_size=VOCAB, n_classes=3, **TINY).eval()
    with pytest.raises(InputShapeError, match=r"pooling='mean' classifies whole sequences .* got an empty sequence"):
        classifier(torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"needs at least one token per sequence; lengths holds 0 at rows \[1\]"):
        classifier(torch.randint(0, VOCAB, (2, 4)), lengths=torch.tensor([4, 0]))
    assert classifier(torch.zeros(0, 4, dtype=torch.long)).shape == (0, 3)


@pytest.mark.parametrize("batch,length", [(2, 0), (0, 5)])
def test_empty_in_empty_out(lm, batch, length):
    ids = torch.zeros(batch, length, dtype=torch.long)
    assert lm(ids).shape == (batch, length, VOCAB)
    out, state = lm.scan(ids)
    assert out.shape == (batch, length, VOCAB)
    _, carried = lm.scan(torch.randint(0, VOCAB, (batch, 3)))
    _, after = lm.scan(ids[:, :0], carried)
    assert after is carried  # L = 0: the state passes through unchanged
    out, state = lm.step(torch.zeros(batch, dtype=torch.long), None)
    assert out.shape == (batch, VOCAB)
