"""SequenceModelConfig: typed, nested, written nested and read in both forms; the SSP's learning-rate scale."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from seqssm.blocks import MambaBlockConfig, SimpleBlockConfig, SSPConfig, block_config, make_stack
from seqssm.models import SequenceModel, SequenceModelConfig, build, model_config
from seqssm.models.hub import FORMAT_VERSION
from seqssm.models.loading import CHECKPOINT_MODEL_CONFIG, model_from_path
from seqssm.optim import param_groups

FLAT = Path(__file__).parents[1] / "fixtures" / "flat_config"
FLAT_FILES = ["placebo-rope-ntp.ckpt", "placebo-rope-ntp-folder", "simple-classification.ckpt",
              "simple-classification-folder"]


@pytest.fixture(scope="module")
def expected():
    """Fixed inputs and the outputs the version that wrote the fixtures computed from each file."""
    return load_file(str(FLAT / "expected.safetensors"))


@pytest.mark.parametrize("name", FLAT_FILES)
def test_files_with_the_flat_config_load_to_the_same_outputs(name, expected):
    model = model_from_path(FLAT / name).eval()
    with torch.no_grad():
        out = model(expected["inputs"], lengths=expected["lengths"])
    torch.testing.assert_close(out, expected[name], rtol=1e-6, atol=1e-6)


def test_flat_configs_map_onto_the_typed_one():
    ntp = model_from_path(FLAT / "placebo-rope-ntp.ckpt").config
    assert model_from_path(FLAT / "placebo-rope-ntp-folder").config == ntp
    assert ntp == SequenceModelConfig(
        d_model=8, n_layers=1, vocab_size=12, pooling=None,
        block=MambaBlockConfig(SSPConfig("s4d", 4, rope={"base": 100.0, "trainable": True}), placebo=True,
                               residual_in_fp32=True))
    simple = model_from_path(FLAT / "simple-classification.ckpt").config
    assert model_from_path(FLAT / "simple-classification-folder").config == simple
    # the flat form stored the Mamba-only settings for Simple models too; they shaped nothing and are dropped
    assert simple.block == SimpleBlockConfig(SSPConfig("s4", 4, layer_kwargs={"dt_max": 0.05}), rms_norm=True,
                                             norm_eps=1e-4)
    stored = torch.load(FLAT / "simple-classification.ckpt", weights_only=True)[CHECKPOINT_MODEL_CONFIG]
    assert stored["block"] == "simple" and stored["expand"] == 2


def test_new_folders_and_checkpoints_hold_the_nested_config(tmp_path):
    model = build("mamba-s4d-placebo-rope", d_input=3, n_classes=2, pooling=None, d_model=8, n_layers=1, d_state=4,
                  rope={"base": 10.0, "targets": ("x",)}, ssp_lr_scale=0.05)
    model.save_pretrained(tmp_path / "folder")
    meta = json.loads((tmp_path / "folder" / "config.json").read_text())
    assert meta["format_version"] == FORMAT_VERSION == 2
    assert meta["model"]["block"]["kind"] == "mamba" and meta["model"]["block"]["placebo"] is True
    assert meta["model"]["block"]["ssp"] == {"layer": "s4d", "d_state": 4, "lr_scale": 0.05,
                                             "rope": {"base": 10.0, "targets": ["x"]}, "layer_kwargs": {},
                                             "init": "default", "plain_params": []}
    loaded = SequenceModel.from_pretrained(tmp_path / "folder")
    assert loaded.config == model.config and isinstance(loaded.config.block, MambaBlockConfig)
    assert SequenceModelConfig.from_dict(json.loads(json.dumps(model.config.to_dict()))) == model.config


def test_replace_takes_fields_nested_blocks_and_flat_names():
    config = model_config("mamba-s6", vocab_size=12, n_classes=2)
    flat = config.replace(d_model=32, dropout=0.0, d_state=8, ssp="s4d", expand=1)
    nested = config.replace(d_model=32, block={"dropout": 0.0, "expand": 1, "ssp": {"layer": "s4d", "d_state": 8}})
    assert flat == nested and flat.block.ssp == SSPConfig("s4d", 8) and config.block.ssp == SSPConfig("s6", 16)
    simple = config.replace(block="simple")  # another kind starts from that kind's defaults
    assert simple.block == SimpleBlockConfig() and simple.block.ssp == SSPConfig("s4d", 64)
    assert config.replace(block={"kind": "simple", "dropout": 0.1}).block == SimpleBlockConfig(dropout=0.1)


def test_config_errors_name_the_setting():
    config = model_config("simple-s4", d_input=3, n_classes=2)
    with pytest.raises(ValueError, match=r"simple blocks have no setting\(s\) \['expand'\] \(settings of mamba"):
        config.replace(expand=1)
    with pytest.raises(ValueError, match=r"unknown SSP setting\(s\) \['dstate'\]"):
        config.replace(block={"ssp": {"dstate": 4}})
    with pytest.raises(ValueError, match="unknown model config entries \\['width'\\]"):
        SequenceModelConfig.from_dict({"d_model": 8, "width": 3, "block": {"kind": "mamba"}})
    with pytest.raises(ValueError, match="unknown block 'lstm'"):
        block_config("lstm")
    with pytest.raises(ValueError, match="unknown sequence layer 'lstm'"):
        SSPConfig("lstm")
    with pytest.raises(ValueError, match="at most one of bidirectional and placebo"):
        MambaBlockConfig(bidirectional=True, placebo=True)
    with pytest.raises(ValueError, match="d_model must be a positive integer"):
        SequenceModelConfig(0)
    with pytest.raises(TypeError, match="from_dict reads dicts"):
        SequenceModelConfig(8, block={"kind": "mamba"})


def ssm_scales(module: torch.nn.Module) -> set[float]:
    return {p._optim["lr_scale"] for p in module.parameters() if getattr(p, "_optim", {}).get("ssm")}


def test_the_ssm_learning_rate_scale_is_a_setting_of_the_ssp():
    default = build("mamba-s6", vocab_size=12, n_classes=2, d_model=8, n_layers=1)
    assert ssm_scales(default) == {0.1}  # Ulbaek 2024 thesis, 12.2.4
    assert ssm_scales(build("mamba-s5", vocab_size=12, n_classes=2, d_model=8, n_layers=1, d_state=4)) == {0.2}
    scaled = build("simple-s4d", vocab_size=12, n_classes=2, d_model=8, n_layers=2, d_state=4,
                   block={"ssp": {"lr_scale": 0.25}})
    assert ssm_scales(scaled) == {0.25}
    (ssm_group,) = [g for g in param_groups(scaled, lr=1e-2) if g["lr"] == pytest.approx(2.5e-3)]
    assert len(ssm_group["params"]) == 2 * 5 and ssm_group["weight_decay"] == 0.0  # A_re, A_im, B, C, Δ of 2 S4Ds
    # the stack the RL cores build reads it the same way
    assert ssm_scales(make_stack("mamba", 8, 1, ssp="s6", d_state=4, ssp_lr_scale=0.5)) == {0.5}
    with pytest.raises(ValueError, match="lr_scale must be positive"):
        SSPConfig("s6", lr_scale=0.0)


def test_from_config_keeps_reading_flat_dicts():
    flat = {"d_model": 8, "n_layers": 1, "block": "mamba", "ssp": "s6", "d_state": 4, "d_input": 3, "n_classes": 2,
            "pooling": "last", "dropout": 0.0, "ssp_kwargs": None, "rope": None}
    model = SequenceModel.from_config(flat)
    assert model.config == model_config("mamba-s6", d_input=3, n_classes=2, pooling="last", d_model=8, n_layers=1,
                                        d_state=4, dropout=0.0)
    assert SequenceModel.from_config(model.config.to_dict()).config == model.config
