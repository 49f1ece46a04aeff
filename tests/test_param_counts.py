"""Parameter counts of the named models against thesis tables 3 and 6 (construction only)."""

import pytest

from seqssm.models import THESIS_TABLE3, THESIS_TABLE6, build


def count(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", THESIS_TABLE3)
def test_table3_cifar10_numerical_within_3_percent(name):
    ours = count(build(name, d_input=3, n_classes=10))
    assert abs(ours / THESIS_TABLE3[name][0] - 1) <= 0.03, (name, ours)


def test_table6_imdb_widths_counts_and_variant_ratios():
    models = {name: build(name, vocab_size=256, n_classes=2) for name in THESIS_TABLE6}
    assert {name: m.config.d_model for name, m in models.items()} == {
        "mamba-s4d": 116, "mamba-s4d-bi": 108, "mamba-s4d-sm": 140,
        "mamba-s6": 116, "mamba-s6-bi": 107, "mamba-s6-sm": 170,
    }
    ours = {name: count(m) for name, m in models.items()}
    for name, thesis in THESIS_TABLE6.items():
        assert abs(ours[name] / thesis - 1) <= 0.05, (name, ours[name], thesis)
        regular = "-".join(name.split("-")[:2])
        ratio, thesis_ratio = ours[name] / ours[regular], thesis / THESIS_TABLE6[regular]
        assert abs(ratio / thesis_ratio - 1) <= 0.03, (name, ratio, thesis_ratio)


@pytest.mark.parametrize("ssp", ["s4d", "s6"])
def test_placebo_has_exactly_the_bidirectional_parameters(ssp):
    bi, placebo = (build(f"mamba-{ssp}-{v}", vocab_size=256, n_classes=2) for v in ("bi", "placebo"))
    assert count(placebo) == count(bi)
    assert [(n, p.shape) for n, p in placebo.named_parameters()] == [(n, p.shape) for n, p in bi.named_parameters()]

