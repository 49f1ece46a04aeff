"""scripts/peer_recipe_check.py: the peer's S4D equals seqssm's S4D on shared parameters, its optimiser is set up as
S4's example.py, and the script trains both models on the MNIST stand-in."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from seqssm.data.generators.standins import write_mnist_standin
from seqssm.layers.s4d import S4D

REPO = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def prc(load_script):
    return load_script("peer_recipe_check")


@pytest.fixture(autouse=True)
def keep_torch_threads():
    """The script and the recipe set torch's thread count, a process-wide setting: put it back afterwards."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def shared_pair(prc, H=6, N=16):
    """A peer S4D and a seqssm S4D (S4D-Lin, B = 1) in float64 holding the same, non-initial, parameters."""
    peer = prc.PeerS4D(H, N).double()
    ours = S4D(H, N, init="lin").double()
    with torch.no_grad():  # move off the initial values, so that the check covers what training can reach
        peer.log_A_real.add_(0.3 * torch.randn_like(peer.log_A_real))
        peer.A_imag.add_(torch.randn_like(peer.A_imag))
        peer.log_dt.add_(0.5 * torch.randn_like(peer.log_dt))
        for name in ("log_A_real", "A_imag", "C", "log_dt", "D"):
            getattr(ours, name).copy_(getattr(peer, name))
        assert torch.equal(torch.view_as_complex(ours.B), torch.ones(H, N // 2, dtype=torch.complex128))
    return peer, ours


def test_peer_s4d_kernel_and_ssm_equal_seqssm_s4d(prc):
    peer, ours = shared_pair(prc)
    L = 257
    torch.testing.assert_close(peer.kernel(L), ours.kernel(L, torch.float64), rtol=1e-9, atol=1e-12)
    u = torch.randn(3, L, 6, dtype=torch.float64)
    torch.testing.assert_close(peer.ssm(u.transpose(1, 2)).transpose(1, 2), ours(u), rtol=1e-9, atol=1e-10)
    # and the recurrence that seqssm's S4D steps through, one sample
    y, state = [], ours.initial_state(1, dtype=torch.float64)
    for t in range(20):
        y_t, state = ours.step(u[:1, t], state)
        y.append(y_t)
    torch.testing.assert_close(torch.stack(y, 1), peer.ssm(u[:1, :20].transpose(1, 2)).transpose(1, 2),
                               rtol=1e-9, atol=1e-10)


def test_peer_s4d_equals_an_independent_reference(prc):
    """The peer's layer against a computation that shares no code with it or with seqssm: the ZOH-discretised
    diagonal SSM stepped in complex128, x_l = exp(ΔA) x_{l-1} + (exp(ΔA) - 1) / A u_l, y_l = 2 Re(C x_l) + D u_l
    (B = 1 folded into C), as the published module (state-spaces/s4 models/s4/s4d.py) defines it: S4DKernel
    materialises A = -exp(log_A_real) + i A_imag and dt = exp(log_dt) and builds the Vandermonde kernel; S4D
    convolves it by FFT at length 2L, adds D u, then GELU, dropout, a 1x1 Conv1d to 2H channels and a GLU over
    channels. Here the kernel is checked against that recurrence's impulse response and against a closed form,
    the SSM against a dense causal convolution, and the block's output against GLU(conv(GELU(recurrence)))."""
    torch.manual_seed(1)
    H, N, L = 3, 8, 40
    peer = prc.PeerS4D(H, N).double().eval()
    with torch.no_grad():  # off the initial values
        peer.log_A_real.add_(0.3 * torch.randn_like(peer.log_A_real))
        peer.A_imag.add_(torch.randn_like(peer.A_imag))
        peer.log_dt.add_(0.5 * torch.randn_like(peer.log_dt))
    A = -peer.log_A_real.detach().exp() + 1j * peer.A_imag.detach()              # (H, N/2)
    dtA = peer.log_dt.detach().exp().unsqueeze(-1) * A
    C = torch.view_as_complex(peer.C.detach())
    D = peer.D.detach()
    u = torch.randn(2, H, L, dtype=torch.float64)

    x = torch.zeros(2, H, N // 2, dtype=torch.complex128)
    ys, impulse = [], []
    xi = torch.zeros(H, N // 2, dtype=torch.complex128)
    for t in range(L):
        x = torch.exp(dtA) * x + (torch.exp(dtA) - 1) / A * u[..., t, None]
        ys.append(2 * (C * x).sum(-1).real + D * u[..., t])
        xi = torch.exp(dtA) * xi + (torch.exp(dtA) - 1) / A * (1.0 if t == 0 else 0.0)
        impulse.append(2 * (C * xi).sum(-1).real)
    y_rec = torch.stack(ys, -1)
    k = peer.kernel(L).detach()
    torch.testing.assert_close(k, torch.stack(impulse, -1), rtol=1e-10, atol=1e-12)
    toeplitz = torch.stack([torch.cat([k[:, :t + 1].flip(-1), k.new_zeros(H, L - t - 1)], -1) for t in range(L)], 1)
    dense = torch.einsum("hts,bhs->bht", toeplitz, u) + D[:, None] * u
    torch.testing.assert_close(peer.ssm(u).detach(), dense, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(dense, y_rec, rtol=1e-9, atol=1e-10)
    expected = F.glu(peer.mix(F.gelu(y_rec)), dim=1)
    torch.testing.assert_close(peer(u).detach(), expected.detach(), rtol=1e-9, atol=1e-10)

    # one real mode, a closed form: A = -1/2, Δ = 0.1, C = 1 gives K_l = 2 (1 - e^(-0.05)) / 0.5 e^(-0.05 l)
    single = prc.PeerS4D(1, 2).double()
    with torch.no_grad():
        single.log_A_real.fill_(math.log(0.5))
        single.A_imag.zero_()
        single.log_dt.fill_(math.log(0.1))
        single.C.copy_(torch.tensor([[[1.0, 0.0]]], dtype=torch.float64))
    ell = torch.arange(5, dtype=torch.float64)
    torch.testing.assert_close(single.kernel(5).detach()[0], 4 * (1 - math.exp(-0.05)) * torch.exp(-0.05 * ell),
                               rtol=1e-12, atol=1e-14)


def test_peer_initialisation_and_optimiser_follow_s4_example(prc):
    torch.manual_seed(0)
    model = prc.PeerModel(d_input=1, d_output=10, d_model=32, n_layers=2, dropout=0.1, d_state=64)
    layer = model.layers[0]
    assert torch.equal(layer.log_A_real.exp(), torch.full((32, 32), 0.5))        # S4D-Lin: Re A = -1/2
    assert torch.allclose(layer.A_imag[3], math.pi * torch.arange(32.0))          # Im A = πn
    dt = layer.log_dt.exp()
    assert 0.001 <= dt.min() and dt.max() <= 0.1
    optimizer = prc.peer_optimizer(model, lr=0.01, weight_decay=0.05)
    groups = {(g["lr"], g["weight_decay"]): {id(p) for p in g["params"]} for g in optimizer.param_groups}
    assert set(groups) == {(0.01, 0.05), (0.001, 0.0)}
    ssm = {id(p) for m in model.layers for p in (m.log_A_real, m.A_imag, m.log_dt)}
    assert groups[(0.001, 0.0)] == ssm                          # A and Δ only: example.py leaves C, D untagged
    assert id(layer.C) in groups[(0.01, 0.05)] and id(layer.D) in groups[(0.01, 0.05)]
    with pytest.raises(ValueError, match="d_state .* even"):
        prc.PeerS4D(4, 7)


def test_channel_dropout_drops_whole_channels(prc):
    x = torch.ones(8, 16, 50)
    y = prc.channel_dropout(x, 0.5, training=True)
    assert set(y.unique().tolist()) <= {0.0, 2.0}
    assert torch.equal(y.amin(-1), y.amax(-1))                  # each channel is dropped at every step or at none
    assert torch.equal(prc.channel_dropout(x, 0.5, training=False), x)


def test_script_trains_both_on_the_mnist_standin(prc, tmp_path, capsys):
    data = write_mnist_standin(tmp_path / "mnist", n_train=40, n_test=24)
    out = tmp_path / "result.json"
    results = prc.main(["--recipe", str(REPO / "seqssm/recipes/smnist/cpu/simple-s4d.yaml"), "--data_dir", str(data),
                        "--steps", "3", "--json", str(out), "--data.init_args.batch_size", "8"])
    printed = capsys.readouterr().out
    assert "3 steps of batch 8" in printed and "seqssm recipe" in printed and "peer: S4 example.py" in printed
    saved = json.loads(out.read_text())
    assert [r["model"] for r in saved["results"]] == ["seqssm recipe", "peer: S4 example.py (S4D)"]
    assert saved["setting"]["train_examples"] == 36 and saved["setting"]["test_examples"] == 24
    for r in results:
        assert 0.0 <= r["test_acc"] <= 1.0 and r["train_seconds"] > 0
    # the same width and depth: the peer has no B (folded into C), 2 layers x 64 x 32 x 2 fewer parameters
    assert results[0]["parameters"] - results[1]["parameters"] == 2 * 64 * 32 * 2


def test_script_refuses_bad_arguments(prc, capsys):
    with pytest.raises(SystemExit):
        prc.main(["--steps", "0"])
    assert "--steps must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        prc.main(["--recipe", "smnist/cpu/simple-s4e"])
    assert "no recipe file or packaged recipe 'smnist/cpu/simple-s4e'; did you mean smnist/cpu/simple-s4d" \
        in capsys.readouterr().err
