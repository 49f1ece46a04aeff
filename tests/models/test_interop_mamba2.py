"""Mamba-2 interop: transformers `Mamba2ForCausalLM` and mamba_ssm Mamba2 folders in, Hugging Face folders out,
against transformers' torch path (logits and greedy generations), and `convert` both ways."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="needs transformers, of the test extra: pip install 'seqssm[test]'")
from safetensors.torch import save_file  # noqa: E402
from transformers import Mamba2Config, Mamba2ForCausalLM  # noqa: E402

from seqssm.errors import PretrainedFormatError  # noqa: E402
from seqssm.models import SequenceModel, build  # noqa: E402
from seqssm.models.interop.convert import convert_folder  # noqa: E402

# Shapes that exercise every mapped setting: groups, chunk sizes against the length, biases, conv width, expand,
# norm epsilon, residual_in_fp32, a tied and an untied head.
SHAPES = {
    "tied": dict(vocab_size=64, hidden_size=16, num_heads=4, head_dim=8, state_size=8, n_groups=2,
                 num_hidden_layers=2, chunk_size=8, tie_word_embeddings=True),
    "untied-biases": dict(vocab_size=37, hidden_size=24, num_heads=12, head_dim=6, state_size=4, n_groups=3,
                          num_hidden_layers=3, expand=3, conv_kernel=2, use_bias=True, use_conv_bias=False,
                          chunk_size=16, layer_norm_epsilon=1e-3, residual_in_fp32=False, tie_word_embeddings=False),
}


def make_hf(seed=0, **kwargs) -> Mamba2ForCausalLM:
    """A random Mamba2ForCausalLM; every tensor perturbed, so zero-initialised biases and unit norms differ too."""
    torch.manual_seed(seed)
    model = Mamba2ForCausalLM(Mamba2Config(**kwargs))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def hf_logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.parametrize("shape", SHAPES)
def test_hf_mamba2_folder_gives_transformers_logits_and_generations(tmp_path, shape):
    hf = make_hf(**SHAPES[shape])
    hf.save_pretrained(tmp_path)
    model = SequenceModel.from_pretrained(tmp_path)
    assert model.config.block.kind == "mamba2" and not model.training
    vocab = SHAPES[shape]["vocab_size"]
    ids = torch.randint(0, vocab, (2, 29))
    with torch.no_grad():
        ours = model(ids)
    torch.testing.assert_close(ours, hf_logits(hf, ids), rtol=1e-4, atol=1e-4)
    # Greedy against transformers' logits of the whole prefix at each step (its cached generate once parted from
    # those at a near tie of two logits, on the first new token)
    theirs = ids[:, :7]
    for _ in range(12):
        theirs = torch.cat([theirs, hf_logits(hf, theirs)[:, -1].argmax(-1, keepdim=True)], 1)
    torch.testing.assert_close(model.generate(ids[:, :7], max_new_tokens=12, temperature=0.0), theirs)


def test_seqssm_mamba2_written_as_hf_loads_in_transformers(tmp_path):
    torch.manual_seed(1)
    model = build("mamba2-ssd", vocab_size=40, d_model=16, n_layers=2, d_state=8, dropout=0.0,
                  block={"ssp": {"layer_kwargs": {"head_dim": 8, "n_groups": 2, "chunk_size": 8}}}).eval()
    model.save_pretrained(tmp_path, format="hf")
    hf = Mamba2ForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 40, (2, 19))
    with torch.no_grad():
        torch.testing.assert_close(hf_logits(hf, ids), model(ids), rtol=1e-4, atol=1e-4)


def write_mamba_ssm(folder, hf: Mamba2ForCausalLM, **ssm_changes):
    """The same weights in mamba_ssm's MambaLMHeadModel layout with Mamba2 mixers (as state-spaces/mamba2-130m)."""
    c = hf.config
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "d_model": c.hidden_size, "d_intermediate": 0, "n_layer": c.num_hidden_layers, "vocab_size": c.vocab_size,
        "ssm_cfg": {"layer": "Mamba2", "d_state": c.state_size, "d_conv": c.conv_kernel, "expand": c.expand,
                    "headdim": c.head_dim, "ngroups": c.n_groups, "chunk_size": c.chunk_size, "bias": c.use_bias,
                    "conv_bias": c.use_conv_bias, **ssm_changes},
        "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True, "residual_in_fp32": c.residual_in_fp32,
        "fused_add_norm": True, "pad_vocab_size_multiple": 1, "tie_embeddings": c.tie_word_embeddings,
        "norm_epsilon": c.layer_norm_epsilon,
    }
    (folder / "config.json").write_text(json.dumps(config))
    state = {k.replace("backbone.embeddings.", "backbone.embedding."): v.clone().contiguous()
             for k, v in hf.state_dict().items() if not (c.tie_word_embeddings and k == "lm_head.weight")}
    save_file(state, folder / "model.safetensors")


@pytest.mark.parametrize("shape", SHAPES)
def test_mamba_ssm_mamba2_folder_and_convert_both_ways(tmp_path, shape):
    hf = make_hf(**SHAPES[shape])
    write_mamba_ssm(tmp_path / "mamba_ssm", hf)
    ids = torch.randint(0, SHAPES[shape]["vocab_size"], (2, 23))
    with torch.no_grad():
        ours = SequenceModel.from_pretrained(tmp_path / "mamba_ssm")(ids)
    torch.testing.assert_close(ours, hf_logits(hf, ids), rtol=1e-4, atol=1e-4)
    convert_folder(tmp_path / "mamba_ssm", tmp_path / "hf", to="hf")
    again = Mamba2ForCausalLM.from_pretrained(tmp_path / "hf").eval()
    torch.testing.assert_close(hf_logits(again, ids), hf_logits(hf, ids), rtol=1e-5, atol=1e-5)
    convert_folder(tmp_path / "hf", tmp_path / "seqssm", to="seqssm")
    with torch.no_grad():
        torch.testing.assert_close(SequenceModel.from_pretrained(tmp_path / "seqssm")(ids), ours, rtol=0, atol=1e-6)


@pytest.mark.parametrize("setting,value,match", [
    ("norm_before_gate", True, r"ssm_cfg.norm_before_gate=True is not supported"),
    ("D_has_hdim", True, r"ssm_cfg.D_has_hdim=True is not supported"),
    ("dt_limit", [0.01, 1.0], r"ssm_cfg.dt_limit=\[0.01, 1.0\] is not supported"),
    ("mystery", 1, r"ssm_cfg.mystery=1 is not supported: not a Mamba-2 setting"),
])
def test_mamba_ssm_mamba2_settings_seqssm_cannot_compute_are_refused(tmp_path, setting, value, match):
    write_mamba_ssm(tmp_path, make_hf(**SHAPES["tied"]), **{setting: value})
    with pytest.raises(PretrainedFormatError, match=match):
        SequenceModel.from_pretrained(tmp_path)


def test_hf_mamba2_time_step_limit_is_refused(tmp_path):
    make_hf(**SHAPES["tied"], time_step_limit=(0.0, 1.0)).save_pretrained(tmp_path)
    with pytest.raises(PretrainedFormatError, match="time_step_limit"):
        SequenceModel.from_pretrained(tmp_path)
