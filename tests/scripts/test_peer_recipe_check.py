"""scripts/peer_recipe_check.py: the peer's S4D equals seqssm's S4D on shared parameters, its optimiser is set up as
S4's example.py, and the script trains both models on the MNIST stand-in."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from seqssm.data.generators.standins import write_mnist_standin
from seqssm.layers.s4d import S4D

REPO = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def prc():
    spec = importlib.util.spec_from_file_location("peer_recipe_check", REPO / "scripts" / "peer_recipe_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    results = prc.main(["--recipe", str(REPO / "recipes/smnist/cpu/simple-s4d.yaml"), "--data_dir", str(data),
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
        prc.main(["--recipe", "recipes/nowhere.yaml"])
    assert "no such file" in capsys.readouterr().err
