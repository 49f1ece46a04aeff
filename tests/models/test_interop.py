"""Pretrained Mamba interop: Hugging Face and mamba_ssm folders in, Hugging Face folders out, against transformers."""

import json

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers", reason="needs transformers, of the test extra: pip install 'seqssm[test]'")
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import MambaConfig, MambaForCausalLM  # noqa: E402

from seqssm.blocks import MambaBlockConfig, SSPConfig  # noqa: E402
from seqssm.models import SequenceModel, SequenceModelConfig, build  # noqa: E402
from seqssm.models.loading import read_weights  # noqa: E402
from seqssm.models.interop import PretrainedFormatError  # noqa: E402

# Shapes that exercise every mapped setting: tied/untied head, projection and conv biases, kernel width,
# expand, explicit and "auto" dt rank, norm epsilon, residual_in_fp32.
SHAPES = {
    "tied": dict(vocab_size=64, hidden_size=16, state_size=4, num_hidden_layers=2),
    "untied-biases": dict(vocab_size=37, hidden_size=24, state_size=8, num_hidden_layers=3, expand=3, conv_kernel=2,
                          use_bias=True, use_conv_bias=False, time_step_rank=5, layer_norm_epsilon=1e-3,
                          residual_in_fp32=False, tie_word_embeddings=False),
    "auto-rank": dict(vocab_size=50, hidden_size=40, state_size=6, num_hidden_layers=2, expand=1, conv_kernel=5,
                      layer_norm_epsilon=1e-6),
}


def make_hf(seed=0, **kwargs) -> MambaForCausalLM:
    """A random MambaForCausalLM; every tensor perturbed, so zero-initialised biases and unit norms differ too."""
    torch.manual_seed(seed)
    model = MambaForCausalLM(MambaConfig(**{"tie_word_embeddings": True, **kwargs}))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model.eval()


def hf_logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


@pytest.fixture
def hf_keeps_float64(monkeypatch):
    """transformers' eager Mamba casts activations and parameters (A_log, D, dt bias) with .float() /
    .to(float32), meant as upcasts from half precision; on float64 they are downcasts. Keep float64 tensors
    as they are: a float64 seqssm S6 computes in float64, its parameters included."""
    real_float, real_to = torch.Tensor.float, torch.Tensor.to

    def keeps(t):
        return t.dtype == torch.float64

    def float_(self, *args, **kwargs):
        return self if keeps(self) else real_float(self, *args, **kwargs)

    def to(self, *args, **kwargs):
        target = kwargs.get("dtype", args[0] if args else None)
        return self if keeps(self) and target == torch.float32 else real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "float", float_)
    monkeypatch.setattr(torch.Tensor, "to", to)


@pytest.mark.parametrize("shape", SHAPES)
def test_hf_folder_logits_float32(tmp_path, shape):
    hf = make_hf(**SHAPES[shape])
    hf.save_pretrained(tmp_path)
    model = SequenceModel.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, SHAPES[shape]["vocab_size"], (2, 23))
    with torch.no_grad():
        ours = model(ids)
    torch.testing.assert_close(ours, hf_logits(hf, ids), rtol=0, atol=1e-5)
    cfg = model.config
    assert (cfg.block.norm_eps, cfg.tie_embeddings) == (hf.config.layer_norm_epsilon, hf.config.tie_word_embeddings)
    assert (model.head.weight is model.embedding.weight) == hf.config.tie_word_embeddings


@pytest.mark.parametrize("shape", SHAPES)
def test_hf_folder_logits_float64(tmp_path, shape, hf_keeps_float64):
    hf = make_hf(**SHAPES[shape]).double()
    hf.save_pretrained(tmp_path)
    model = SequenceModel.from_pretrained(tmp_path, dtype=torch.float64).eval()
    assert model.embedding.weight.dtype == torch.float64
    ids = torch.randint(0, SHAPES[shape]["vocab_size"], (2, 31))
    with torch.no_grad():
        ours = model(ids)
    theirs = hf_logits(hf, ids)
    assert theirs.dtype == torch.float64
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-9)


def test_sharded_hf_folder(tmp_path):
    hf = make_hf(**SHAPES["untied-biases"])
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file() and len(list(tmp_path.glob("*.safetensors"))) > 1
    ids = torch.randint(0, 37, (1, 17))
    with torch.no_grad():
        ours = SequenceModel.from_pretrained(tmp_path).eval()(ids)
    torch.testing.assert_close(ours, hf_logits(hf, ids), rtol=0, atol=1e-5)
    shard = sorted(tmp_path.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(PretrainedFormatError, match=rf"shard {shard.name} \(holding 'backbone\."):
        SequenceModel.from_pretrained(tmp_path)


def write_mamba_ssm(folder, hf: MambaForCausalLM, vocab_size: int, pad_multiple: int):
    """The same weights in mamba_ssm's layout: config.json of MambaLMHeadModel and a torch.save'd state dict
    (`backbone.embedding`, the tied head stored under both names as torch.save does)."""
    c = hf.config
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "d_model": c.hidden_size, "n_layer": c.num_hidden_layers, "vocab_size": vocab_size,
        "ssm_cfg": {"d_state": c.state_size, "d_conv": c.conv_kernel, "expand": c.expand, "dt_rank": c.time_step_rank,
                    "conv_bias": c.use_conv_bias, "bias": c.use_bias, "dt_min": 0.001},
        "rms_norm": True, "residual_in_fp32": c.residual_in_fp32, "fused_add_norm": True,
        "pad_vocab_size_multiple": pad_multiple, "tie_embeddings": c.tie_word_embeddings,
        "norm_epsilon": c.layer_norm_epsilon,
    }
    (folder / "config.json").write_text(json.dumps(config))
    state = {k.replace("backbone.embeddings.", "backbone.embedding."): v.clone() for k, v in hf.state_dict().items()}
    torch.save(state, folder / "pytorch_model.bin")


@pytest.mark.parametrize("shape", ["tied", "untied-biases"])
def test_mamba_ssm_folder(tmp_path, shape):
    hf = make_hf(**SHAPES[shape])
    padded = SHAPES[shape]["vocab_size"]
    vocab = padded - 3  # mamba_ssm pads vocab_size up to a multiple: 61 -> 64, 34 -> 37 with multiples 8 / 37
    write_mamba_ssm(tmp_path, hf, vocab, 8 if padded == 64 else 37)
    model = SequenceModel.from_pretrained(tmp_path).eval()
    assert model.embedding.num_embeddings == padded and model.config.vocab_size == vocab
    ids = torch.randint(0, vocab, (2, 19))
    with torch.no_grad():
        ours = model(ids)
    assert ours.shape[-1] == vocab
    torch.testing.assert_close(ours, hf_logits(hf, ids)[..., :vocab], rtol=0, atol=1e-5)


def test_imported_models_keep_mambas_settings_not_the_thesis_recipes(tmp_path):
    # the Ulbaek 2024 thesis recipes' initialisation and dropout place are recipe settings: an imported model (no
    # dropout) and build("mamba-s6") keep mamba_ssm's initialisation and the default place
    make_hf(**SHAPES["tied"]).save_pretrained(tmp_path / "hf")
    write_mamba_ssm(tmp_path / "ssm", make_hf(**SHAPES["tied"]), SHAPES["tied"]["vocab_size"], 8)
    for folder in ("hf", "ssm"):
        block = SequenceModel.from_pretrained(tmp_path / folder).config.block
        assert (block.dropout, block.dropout_position, block.ssp.init) == (0.0, "ssp_output", "default")
    block = build("mamba-s6", vocab_size=12).config.block
    assert (block.dropout, block.dropout_position, block.ssp.init) == (0.1, "ssp_output", "default")


def test_mamba_ssm_layernorm_config(tmp_path):
    hf = make_hf(**SHAPES["tied"])
    write_mamba_ssm(tmp_path, hf, 64, 1)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "rms_norm": False}))
    state = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
    norm_weights = [k for k in state if k.endswith(("norm.weight", "norm_f.weight"))]
    norms = {k.replace(".weight", ".bias"): torch.randn(16) for k in norm_weights}
    torch.save({**state, **norms}, tmp_path / "pytorch_model.bin")
    model = SequenceModel.from_pretrained(tmp_path)
    assert isinstance(model.backbone.norm_f, nn.LayerNorm)
    assert torch.equal(model.backbone.layers[1].norm.bias, norms["backbone.layers.1.norm.bias"])
    with pytest.raises(PretrainedFormatError, match="rms_norm"):
        model.save_pretrained(tmp_path / "hf", format="hf")


def test_export_hf_loads_in_transformers(tmp_path):
    torch.manual_seed(1)
    block = MambaBlockConfig(SSPConfig("s6", d_state=4), d_conv=3, proj_bias=True, dt_rank=3, norm_eps=1e-4)
    model = SequenceModel(SequenceModelConfig(24, 2, block, vocab_size=61, pooling=None, tie_embeddings=True,
                                              pad_vocab_size_multiple=8)).eval()
    model.save_pretrained(tmp_path, format="hf")
    hf = MambaForCausalLM.from_pretrained(tmp_path).eval()
    assert hf.config.vocab_size == 64 and hf.config.use_bias and hf.config.layer_norm_epsilon == 1e-4
    ids = torch.randint(0, 61, (2, 21))
    with torch.no_grad():
        ours = model(ids)
    torch.testing.assert_close(hf_logits(hf, ids)[..., :61], ours, rtol=0, atol=1e-5)


def test_hf_round_trip_is_exact(tmp_path):
    hf = make_hf(**SHAPES["untied-biases"])
    hf.save_pretrained(tmp_path / "a")
    SequenceModel.from_pretrained(tmp_path / "a").save_pretrained(tmp_path / "b", format="hf")
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # and through a seqssm folder
    SequenceModel.from_pretrained(tmp_path / "b").save_pretrained(tmp_path / "c")
    again = SequenceModel.from_pretrained(tmp_path / "c")
    assert again.config == SequenceModel.from_pretrained(tmp_path / "a").config


@pytest.mark.parametrize("model, setting", [
    (lambda: build("mamba-s4d", vocab_size=32, d_model=16, n_layers=1), "ssp"),
    (lambda: build("simple-s4d", vocab_size=32, d_model=16, n_layers=1), "block"),
    (lambda: build("mamba-s6-bi", vocab_size=32, n_classes=2, d_model=16, n_layers=1), "bidirectional"),
    (lambda: build("mamba-s6", vocab_size=32, n_classes=3, d_model=16, n_layers=1), "n_classes"),
    (lambda: build("mamba-s6-rope", vocab_size=32, d_model=16, n_layers=1), "rope"),
])
def test_export_hf_refuses_what_hf_cannot_hold(tmp_path, model, setting):
    with pytest.raises(PretrainedFormatError, match=rf"{setting}=.*not supported"):
        model().save_pretrained(tmp_path, format="hf")
    assert not (tmp_path / "config.json").exists()


def test_greedy_generation_matches_transformers(tmp_path):
    hf = make_hf(**SHAPES["untied-biases"])
    hf.generation_config.eos_token_id = None  # random weights: do not stop early on token 0
    hf.save_pretrained(tmp_path)
    model = SequenceModel.from_pretrained(tmp_path).eval()
    prompt = torch.randint(0, 37, (2, 9))
    with torch.no_grad():
        theirs = hf.generate(prompt, max_new_tokens=16, do_sample=False, attention_mask=torch.ones_like(prompt))
    ours = model.generate(prompt, 16, top_k=1)
    assert torch.equal(ours, theirs)


# -- bad folders ---------------------------------------------------------------------------------------------

@pytest.fixture
def hf_dir(tmp_path):
    make_hf(**SHAPES["tied"]).save_pretrained(tmp_path / "m")
    return tmp_path / "m"


def edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def test_missing_files(tmp_path, hf_dir):
    with pytest.raises(FileNotFoundError, match=r"nowhere: no such file or folder \(nor a Hub id"):
        SequenceModel.from_pretrained(tmp_path / "nowhere")
    (hf_dir / "model.safetensors").unlink()
    with pytest.raises(PretrainedFormatError, match=rf"{hf_dir}: no weights: expected model.safetensors"):
        SequenceModel.from_pretrained(hf_dir)


def test_truncated_safetensors_names_file_and_key(hf_dir):
    path = hf_dir / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(PretrainedFormatError, match=rf"{path}: truncated: tensor 'backbone\.[\w.]+'"):
        SequenceModel.from_pretrained(hf_dir)


def test_shape_mismatch_names_file_and_key(hf_dir):
    edit_config(hf_dir, state_size=8)
    with pytest.raises(PretrainedFormatError, match=r"model\.safetensors: tensor 'backbone\.layers\.0\.mixer\.A_log' "
                                                    r"has shape \[32, 4\], but .*config\.json describes a model whose "
                                                    r"'backbone\.layers\.0\.branches\.0\.ssp\.A_log' is \[32, 8\]"):
        SequenceModel.from_pretrained(hf_dir)


def test_missing_and_unexpected_tensors(hf_dir):
    path = hf_dir / "model.safetensors"
    tensors = load_file(path)
    save_file({k: v for k, v in tensors.items() if k != "backbone.layers.1.mixer.D"}, path, metadata={"format": "pt"})
    with pytest.raises(PretrainedFormatError, match=r"model\.safetensors: missing tensor 'backbone\.layers\.1\.mixer"
                                                    r"\.D'"):
        SequenceModel.from_pretrained(hf_dir)
    save_file({**tensors, "backbone.layers.1.mixer.extra": torch.zeros(2)}, path, metadata={"format": "pt"})
    with pytest.raises(PretrainedFormatError, match=r"unexpected tensor 'backbone\.layers\.1\.mixer\.extra'"):
        SequenceModel.from_pretrained(hf_dir)


class _Payload:
    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path('PWNED').write_text('ran')",))


def test_pickle_payload_is_refused_never_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_mamba_ssm(tmp_path / "m", make_hf(**SHAPES["tied"]), 64, 8)
    state = torch.load(tmp_path / "m" / "pytorch_model.bin", weights_only=True)
    with open(tmp_path / "m" / "pytorch_model.bin", "wb") as f:
        torch.save({**state, "evil": _Payload()}, f)
    with pytest.raises(PretrainedFormatError, match=r"pytorch_model\.bin: refused"):
        SequenceModel.from_pretrained(tmp_path / "m")
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("fmt, changes, setting", [
    ("hf", {"hidden_act": "gelu"}, "hidden_act"),
    ("hf", {"expand": 1.5}, "expand"),
    ("hf", {"model_type": "jamba"}, "model_type"),
    ("mamba_ssm", {"ssm_cfg": {"layer": "Mamba3"}}, "ssm_cfg.layer"),
    ("mamba_ssm", {"attn_layer_idx": [1]}, "attn_cfg"),
    ("mamba_ssm", {"attn_layer_idx": [1], "attn_cfg": {"num_heads": 4, "rotary_emb_interleaved": True}},
     "attn_cfg.rotary_emb_interleaved"),
    ("mamba_ssm", {"attn_layer_idx": [1], "attn_cfg": {"num_heads": 4, "causal": False}}, "attn_cfg.causal"),
    ("mamba_ssm", {"d_intermediate": 64}, "d_intermediate"),
    ("mamba_ssm", {"ssm_cfg": {"d_state": 4, "ngroups": 2}}, "ssm_cfg.ngroups"),
    ("mamba_ssm", {"bidirectional": True}, "bidirectional"),
])
def test_unrepresentable_configs_are_refused_by_name(tmp_path, fmt, changes, setting):
    hf = make_hf(**SHAPES["tied"])
    if fmt == "hf":
        hf.save_pretrained(tmp_path)
    else:
        write_mamba_ssm(tmp_path, hf, 64, 8)
    edit_config(tmp_path, **changes)
    with pytest.raises(PretrainedFormatError, match=rf"config\.json: {setting}=.* is not supported"):
        SequenceModel.from_pretrained(tmp_path)


def test_init_from_reads_foreign_folders(tmp_path):
    hf = make_hf(**SHAPES["untied-biases"])
    hf.save_pretrained(tmp_path / "hf")
    write_mamba_ssm(tmp_path / "ms", hf, 37, 1)
    a, b = read_weights(tmp_path / "hf")[0], read_weights(tmp_path / "ms")[0]
    assert a.keys() == b.keys() == SequenceModel.from_pretrained(tmp_path / "hf").state_dict().keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


# -- command line and finetuning -----------------------------------------------------------------------------

WORDS = ["the", "film", "was", "a", "plot", "actor", "great", "bad", "scene", "and", "of", "café"]


@pytest.fixture
def lm_dir(tmp_path):
    """A Hugging Face Mamba folder with a word-level tokenizer.json over the IMDB stand-in's words."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = tmp_path / "lm"
    make_hf(**SHAPES["tied"]).save_pretrained(folder)
    vocab = {w: i for i, w in enumerate(["[UNK]", "[PAD]", *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def test_generate_command_text_and_ids(lm_dir, capsys):
    from seqssm.cli import main

    model = SequenceModel.from_pretrained(lm_dir).eval()
    main(["generate", str(lm_dir), "--prompt", "the film was", "--max-new-tokens", "6"])
    ids = model.generate(torch.tensor([[2, 3, 4]]), 6, temperature=0)[0]
    vocab = ["[UNK]", "[PAD]", *WORDS]
    # ids past the tokenizer's vocabulary decode to no text
    expected = " ".join(vocab[i] if i < len(vocab) else "" for i in ids.tolist()).split()
    assert capsys.readouterr().out.split() == expected
    (lm_dir / "tokenizer.json").unlink()
    main(["generate", str(lm_dir), "--prompt", "2 3 4", "--max-new-tokens", "6"])
    assert capsys.readouterr().out.split() == [str(i) for i in ids.tolist()]


def test_convert_command(lm_dir, tmp_path, capsys):
    from seqssm.cli import main

    main(["convert", str(lm_dir), str(tmp_path / "s"), "--to", "seqssm"])
    assert "model_overrides" in capsys.readouterr().out
    assert json.loads((tmp_path / "s" / "config.json").read_text())["format"] == "seqssm"
    assert (tmp_path / "s" / "tokenizer.json").is_file()
    main(["convert", str(tmp_path / "s"), str(tmp_path / "h"), "--to", "hf"])
    ids = torch.randint(0, 64, (1, 12))
    torch.testing.assert_close(hf_logits(MambaForCausalLM.from_pretrained(tmp_path / "h"), ids),
                               hf_logits(MambaForCausalLM.from_pretrained(lm_dir), ids), rtol=0, atol=0)
    build("mamba-s4d", vocab_size=32, d_model=16, n_layers=1).save_pretrained(tmp_path / "s4d")
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", str(tmp_path / "s4d"), str(tmp_path / "x"), "--to", "hf"])
    assert exit_info.value.code == 2 and "ssp='s4d' is not supported" in capsys.readouterr().err


def test_finetune_recipe_classifies_with_an_imported_lm(lm_dir, tmp_path):
    """`seqssm fit` with the recipe finetune/mamba_imdb, shrunk: init_from a Hugging Face folder, fresh head."""
    from pathlib import Path

    from seqssm.cli import make_cli
    from seqssm.data.generators.standins import write_imdb_standin
    from seqssm.models.interop import architecture_overrides

    data = write_imdb_standin(tmp_path / "imdb", n=12)
    recipe = Path(__file__).parents[2] / "seqssm" / "recipes" / "finetune" / "mamba_imdb.yaml"
    overrides = architecture_overrides(SequenceModel.from_pretrained(lm_dir).config)
    cli = make_cli([
        "fit", "--config", str(recipe), "--model.init_args.model_overrides", json.dumps(overrides),
        "--model.init_args.init_from", str(lm_dir), "--data.init_args.pretrained", str(lm_dir),
        "--data.init_args.data_dir", str(data), "--data.init_args.max_length", "48", "--data.init_args.batch_size", "4",
        "--trainer.default_root_dir", str(tmp_path / "run"), "--trainer.max_steps", "3",
        "--trainer.accumulate_grad_batches", "1", "--trainer.val_check_interval", "1.0",
        "--trainer.limit_val_batches", "1", "--trainer.enable_progress_bar", "false",
    ])
    report = cli.model.init_report
    assert report.clean and report.skipped == ["head.weight", "head.bias"]
    assert "embedding.weight" in report.loaded and "backbone.layers.1.branches.0.ssp.A_log" in report.loaded
    assert cli.trainer.global_step == 3 and cli.model.model.head.out_features == 2
    assert (tmp_path / "run" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt").is_file()
