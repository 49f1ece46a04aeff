"""Hybrid stacks: Mamba / Mamba-2 models with attention layers at attn_layer_idx, as mamba_ssm's MambaConfig defines
them. Configs round-trip, generation with the KV cache gives the tokens of a full forward, mamba_ssm hybrid folders
load, and what cannot be built is refused by name."""

import json

import pytest
import torch
from safetensors.torch import save_file

from seqssm.blocks import AttentionBlock, Mamba2Block, MambaBlock
from seqssm.errors import PretrainedFormatError
from seqssm.models import SequenceModel, build
from seqssm.models.config import SequenceModelConfig
from seqssm.models.formats import mamba_ssm
from seqssm.models.formats.mamba_lm import external_keys

ATTN = {"n_heads": 4, "n_kv_heads": 2, "rotary_dim": 4, "d_conv": 4, "qkv_bias": False, "out_bias": False}


def hybrid(name="mamba2-ssd", attn=ATTN, **changes):
    torch.manual_seed(0)
    settings = dict(vocab_size=50, d_model=32, n_layers=3, dropout=0.0, attn_layer_idx=[1], attn=attn)
    if name.startswith("mamba2"):
        settings.update(d_state=8, block={"ssp": {"layer_kwargs": {"head_dim": 16, "chunk_size": 4}}})
    return build(name, **{**settings, **changes}).eval()


@pytest.mark.parametrize("name, kind", [("mamba2-ssd", Mamba2Block), ("mamba-s6", MambaBlock)])
def test_attention_layers_sit_at_their_depths_and_the_config_round_trips(name, kind):
    model = hybrid(name, attn_layer_idx=[2, 0])
    assert [type(layer) for layer in model.backbone.layers] == [AttentionBlock, kind, AttentionBlock]
    config = model.config
    assert config.attn_layer_idx == [0, 2]
    assert SequenceModelConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert "attn" not in build(name, vocab_size=50, d_model=32).config.to_dict()  # plain models' files as before


def test_generation_with_the_kv_cache_gives_the_full_forwards_tokens():
    model = hybrid()
    prompt = torch.randint(0, 50, (3, 6))
    out = model.generate(prompt, 9, temperature=0)
    with torch.no_grad():
        greedy = model(out)[:, 5:-1].argmax(-1)
    assert torch.equal(greedy, out[:, 6:])
    with pytest.raises(ValueError, match="KV cache of this model's attention layers"):
        model.generate(prompt, 2, cuda_graph=True)


def test_the_models_scan_continues_from_its_state_with_resets():
    model = hybrid()
    ids = torch.randint(0, 50, (2, 12))
    resets = torch.zeros(2, 12, dtype=torch.bool)
    resets[1, 5] = True
    with torch.no_grad():
        whole, _ = model.scan(ids, None, resets)
        first, state = model.scan(ids[:, :7], None, resets[:, :7])
        second, _ = model.scan(ids[:, 7:], state)
        torch.testing.assert_close(torch.cat([first, second], 1), whole, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(whole[1, 5:], model(ids[1:, 5:])[0], atol=1e-5, rtol=1e-5)


def test_saved_and_loaded_in_seqssm_format(tmp_path):
    model = hybrid()
    model.save_pretrained(tmp_path)
    ids = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(SequenceModel.from_pretrained(tmp_path)(ids), model(ids))
    with pytest.raises(PretrainedFormatError, match="attn_layer_idx=.*hold no attention layers"):
        model.save_pretrained(tmp_path / "hf", format="hf")


def write_mamba_ssm_hybrid(model: SequenceModel, folder, mlp_dim=0):
    """`model`'s weights in mamba_ssm's MambaLMHeadModel layout with MHA layers at attn_layer_idx."""
    c, block = model.config, model.config.block
    ssd = block.ssp.layer_kwargs
    attn = {"num_heads": c.attn.n_heads, "num_heads_kv": c.attn.n_kv_heads, "rotary_emb_dim": c.attn.rotary_dim,
            "d_conv": c.attn.d_conv, "qkv_proj_bias": c.attn.qkv_bias, "out_proj_bias": c.attn.out_bias,
            "causal": True, "mlp_dim": mlp_dim}
    config = {"d_model": c.d_model, "d_intermediate": 0, "n_layer": c.n_layers, "vocab_size": c.vocab_size,
              "ssm_cfg": {"layer": "Mamba2", "d_state": block.ssp.d_state, "headdim": ssd["head_dim"],
                          "chunk_size": ssd["chunk_size"]},
              "attn_layer_idx": c.attn_layer_idx, "attn_cfg": attn, "rms_norm": True, "residual_in_fp32": False,
              "fused_add_norm": True, "pad_vocab_size_multiple": 1, "tie_embeddings": False}
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    own = model.state_dict()
    names = external_keys(own, mamba_ssm.TOP_KEYS, c)
    save_file({names[k]: v.contiguous() for k, v in own.items()}, folder / "model.safetensors")


@pytest.mark.parametrize("mlp_dim", [0, 200])
def test_mamba_ssm_hybrid_folders_load(tmp_path, mlp_dim):
    # mamba_ssm rounds its MHA's mlp_dim up to a multiple of 256: the folder says 200, its weights hold 256
    model = hybrid(attn={**ATTN, "mlp_dim": -(-mlp_dim // 256) * 256})
    write_mamba_ssm_hybrid(model, tmp_path / "ms", mlp_dim)
    loaded = SequenceModel.from_pretrained(tmp_path / "ms")
    assert loaded.config.attn == model.config.attn
    ids = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids))


@pytest.mark.parametrize("changes, match", [
    (dict(attn_layer_idx=[3]), r"distinct layers in 0\.\.2"),
    (dict(attn_layer_idx=[1, 1]), "distinct layers"),
    (dict(attn=None), "needs attn"),
    (dict(attn_layer_idx=[]), "give attn_layer_idx too"),
    (dict(attn={"n_heads": 4, "heads": 2}), r"unknown attention setting\(s\) \['heads'\]"),
])
def test_bad_hybrid_settings_are_refused_by_name(changes, match):
    with pytest.raises(ValueError, match=match):
        hybrid(**changes)


@pytest.mark.parametrize("name, match", [("simple-s4d", "pre-norm stacks"), ("mamba-s6-bi", "causal")])
def test_attention_joins_only_causal_pre_norm_stacks(name, match):
    with pytest.raises(ValueError, match=match):
        build(name, vocab_size=50, n_classes=2, d_model=32, attn_layer_idx=[0], attn={"n_heads": 4})
