"""State dicts written before the layers / blocks redesign still load, strictly, and give the same outputs.

`saved_state_dicts.safetensors` holds, for every case below, the parameters of a small module built by
the code before the redesign, an input and that module's output on it (keys "<case>/<name>"). Cases
cover the named supervised models, the PPO memory cores and the SAC history encoders (their masked scan).
Rewrite it only when a change of keys is intended: `python tests/blocks/test_saved_state_dicts.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from seqssm.models import build

pytest.importorskip("gymnasium", reason="the PPO cores and SAC encoders need the rl extra: pip install 'seqssm[rl]'")

from seqssm.rl.core import CoreConfig, build_core
from seqssm.rl.offpolicy import HistoryEncoderConfig, HistoryNet

FIXTURE = Path(__file__).with_name("saved_state_dicts.safetensors")
OBS, ACT, BATCH, LENGTH = 3, 2, 3, 6

MODELS = ("mamba-s6", "mamba-s6-rope", "mamba-s4d-placebo-rope", "mamba-s4-bi", "simple-s4d-rope", "simple-s4")
CORES = {
    **{f"core-residual-{layer}": dict(layer=layer) for layer in
       ("s5", "s6", "s4d", "s4", "mingru", "gru", "kalman", "vssm", "lssl")},
    "core-mamba-s6": dict(layer="s6", block="mamba"),
    "core-simple-s4d": dict(layer="s4d", block="simple", activation="gelu"),
}
ENCODERS = ("vssm", "kalman", "kalman_u", "mamba", "gru", "s5", "s6", "mingru", "transformer")


def build_case(name: str) -> torch.nn.Module:
    """The (freshly initialised) module of case `name`."""
    if name in MODELS:
        return build(name, d_input=OBS, n_classes=5, pooling=None, d_model=8, n_layers=2, d_state=4, dropout=0.0)
    if name in CORES:
        return build_core(CoreConfig(d_model=8, d_state=4, n_layers=2, **CORES[name]))
    kind = name.removeprefix("encoder-")
    rms = kind in ("kalman", "mamba")  # the encoders' optional final norm, under its old key
    # the encoders were saved under SAC's former keys; they read into the core config SAC now takes
    return HistoryNet(OBS, ACT, HistoryEncoderConfig(kind=kind, d_model=8, d_state=16, n_layers=2, rms_norm=rms,
                                                     context=4, d_ff=16).core_config())


CASES = (*MODELS, *CORES, *(f"encoder-{k}" for k in ENCODERS))


def run_case(name: str, module: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """The output that the fixture stores: forward for models, scan for cores, a masked scan for encoders."""
    if name in MODELS:
        return module(inputs)
    if name in CORES:
        return module.scan(inputs)[0]
    mask = torch.arange(LENGTH) < torch.tensor([LENGTH, 2, 4])[:, None]
    return module.scan(inputs[..., :OBS], inputs[..., OBS:], mask=mask)[0]


def case_input(name: str) -> torch.Tensor:
    width = OBS + ACT if name.startswith("encoder-") else (8 if name in CORES else OBS)
    return torch.randn(BATCH, LENGTH, width, generator=torch.Generator().manual_seed(len(name)))


@pytest.fixture(scope="module")
def saved():
    return load_file(FIXTURE)


@pytest.mark.parametrize("name", CASES)
def test_saved_state_dict_loads_strictly_and_gives_the_saved_output(saved, name):
    prefix = f"{name}/"
    state = {k[len(prefix):]: v for k, v in saved.items() if k.startswith(prefix) and "/" not in k[len(prefix):]}
    torch.manual_seed(123)  # a different init: every parameter must come from the file
    module = build_case(name).eval()
    if not name.startswith("encoder-"):  # encoders' old keys may load through HistoryNet's renaming hook
        assert sorted(module.state_dict()) == sorted(state)
    module.load_state_dict(state, strict=True)
    with torch.no_grad():
        out = run_case(name, module, saved[f"{name}/__input__/x"])
    torch.testing.assert_close(out, saved[f"{name}/__output__/y"], rtol=1e-5, atol=1e-5)


def write_fixture() -> None:
    tensors = {}
    for name in CASES:
        torch.manual_seed(0)
        module = build_case(name).eval()
        with torch.no_grad():
            for p in module.parameters():  # off the init, so that every parameter shows in the output
                p.add_(0.05 * torch.randn_like(p))
            x = case_input(name)
            y = run_case(name, module, x)
        tensors.update({f"{name}/{k}": v.contiguous() for k, v in module.state_dict().items()})
        tensors[f"{name}/__input__/x"], tensors[f"{name}/__output__/y"] = x, y.contiguous()
    save_file(tensors, FIXTURE)
    print(f"wrote {len(CASES)} cases to {FIXTURE}", file=sys.stderr)


if __name__ == "__main__":
    write_fixture()
