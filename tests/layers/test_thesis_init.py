"""SSPConfig.init: "thesis" gives the initial parameters of Ulbaek 2024 thesis, 12.2.4; "default" keeps S4's
and Mamba's."""

import pytest
import torch

from seqssm.blocks import SSPConfig, block_config
from seqssm.layers.hippo import legs_nplr, s4_init
from seqssm.layers.s4 import S4
from seqssm.layers.s4d import S4D
from seqssm.layers.s6 import S6
from seqssm.models import SequenceModelConfig, build, model_config

H, N = 2000, 16  # many channels: the distribution checks below see H (or H N / 2) draws


def ssp_layers(name, cls, **overrides):
    model = build(name, vocab_size=12, n_classes=2, n_layers=1, **overrides)
    return [m for m in model.modules() if isinstance(m, cls)]


def legs_basis_B(layer):
    """The layer's B (H, N/2 modes) mapped back to the HiPPO-LegS basis: V_full (B, conj B) = 2 Re(V B), (H, N)."""
    V = legs_nplr(layer.d_state)[3]
    return 2 * (torch.view_as_complex(layer.B.double()).to(V.dtype) @ V.T).real


def check_delta(layer, distribution):
    dt = torch.exp(layer.log_dt.double())
    assert dt.min() >= 1e-3 * (1 - 1e-6) and dt.max() <= 0.1 * (1 + 1e-6)
    below = (dt < 0.01).double().mean().item()
    # uniform on (0.001, 0.1): 1/11 of the draws below 0.01; log-uniform: half of them
    expected = (0.01 - 0.001) / (0.1 - 0.001) if distribution == "uniform" else 0.5
    assert abs(below - expected) < 0.04, (distribution, below)


def check_c_d_b(layer):
    C = torch.view_as_complex(layer.C.double())
    # a standard complex Gaussian, unscaled: E|C|^2 = 1, real and imaginary parts of variance 1/2, mean 0
    assert abs((C.abs() ** 2).mean().item() - 1) < 0.05
    assert abs(C.real.var().item() - 0.5) < 0.03 and abs(C.imag.var().item() - 0.5) < 0.03
    assert abs(C.real.mean().item()) < 0.02
    assert torch.equal(layer.D, torch.ones_like(layer.D))
    # B_n = (2n + 1)^(1/2) (eq. 76), read in the LegS basis the DPLR / diagonal form is a change of basis of
    expected = torch.sqrt(2 * torch.arange(layer.d_state, dtype=torch.float64) + 1).expand(layer.d_model, -1)
    torch.testing.assert_close(legs_basis_B(layer), expected, rtol=0, atol=1e-5)


def test_thesis_init_of_s4d():
    torch.manual_seed(0)
    (layer,) = ssp_layers("simple-s4d", S4D, d_model=H, d_state=N, ssp_init="thesis")
    Lambda = legs_nplr(N)[0]
    A = torch.complex(-torch.exp(layer.log_A_real.double()), layer.A_imag.double())
    torch.testing.assert_close(A, Lambda.expand(H, -1), rtol=1e-6, atol=1e-6)  # A = Λ of the DPLR form
    check_c_d_b(layer)
    check_delta(layer, "uniform")


def test_thesis_init_of_s4():
    torch.manual_seed(0)
    (layer,) = ssp_layers("simple-s4", S4, d_model=H, d_state=N, ssp_init="thesis")
    Lambda, P, _ = (t[0].to(torch.complex128) for t in s4_init(N, 1, torch.float64))
    A = torch.complex(-torch.exp(layer.log_A_real.double()), layer.A_imag.double())
    torch.testing.assert_close(A, Lambda.expand(H, -1), rtol=1e-6, atol=1e-6)  # the full DPLR form: Λ and P
    torch.testing.assert_close(torch.view_as_complex(layer.P.double()), P.expand(H, -1), rtol=0, atol=1e-6)
    check_c_d_b(layer)
    check_delta(layer, "uniform")


def test_thesis_init_of_s6():
    layers = ssp_layers("mamba-s6", S6, d_model=32, ssp_init="thesis")
    assert len(layers) == 1
    (layer,) = layers
    assert torch.equal(layer.A, torch.full((64, 16), -0.5))  # Re Λ of the LegS DPLR form, for every state
    assert torch.equal(layer.D, torch.ones(64))
    # B, C and Δ come from the input projections (12.2.4): those keep mamba_ssm's initialisation
    torch.manual_seed(1)
    default = ssp_layers("mamba-s6", S6, d_model=32)[0]
    torch.manual_seed(1)
    thesis = ssp_layers("mamba-s6", S6, d_model=32, ssp_init="thesis")[0]
    for name in ("x_proj.weight", "dt_proj.weight", "dt_proj.bias"):
        assert torch.equal(thesis.get_parameter(name), default.get_parameter(name)), name


def test_default_init_is_s4s_and_mambas():
    torch.manual_seed(0)
    (s4d,) = ssp_layers("simple-s4d", S4D, d_model=H, d_state=N)
    check_delta(s4d, "log-uniform")
    (s6,) = ssp_layers("mamba-s6", S6, d_model=8)
    torch.testing.assert_close(s6.A, -torch.arange(1, 17, dtype=torch.float32).expand(16, -1))  # S4D-Real
    assert model_config("mamba-s6").block.ssp.init == "default"


def test_thesis_init_in_configs_and_its_errors():
    config = build("mamba-s6", vocab_size=12, n_classes=2, n_layers=1, ssp_init="thesis").config
    assert config.block.ssp.init == "thesis"
    assert SequenceModelConfig.from_dict(config.to_dict()) == config
    assert SSPConfig("s4d", init="thesis").layer_arguments() == {"init": "legs", "dt_distribution": "uniform"}
    assert SSPConfig("s4d", init="thesis", layer_kwargs={"dt_min": 0.01}).layer_arguments()["dt_min"] == 0.01
    with pytest.raises(ValueError, match="contradict init='thesis'"):
        SSPConfig("s4d", init="thesis", layer_kwargs={"init": "lin"})
    with pytest.raises(ValueError, match="defined for the layers"):
        block_config("mamba", ssp="s5", ssp_init="thesis")
    with pytest.raises(ValueError, match="SSPConfig.init must be one of"):
        SSPConfig("s6", init="mamba-ish")
    with pytest.raises(ValueError, match="Δ distribution"):
        S4D(4, 4, dt_distribution="normal")
    with pytest.raises(ValueError, match="A_init"):
        S6(4, 4, A_init="real")
