"""SequenceModel: embedding -> block stack (+ final norm) -> pooling -> head (Ulbaek 2024 thesis, 4.2.3, 12.1);
`build(name, ...)`: the named thesis models (`seqssm.models.registry`).

Saved models are read by `seqssm.models.reading`, which sits below this module and is handed the class to build.
"""

from __future__ import annotations

import math
import operator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from seqssm.blocks.stack import make_stack
from seqssm.errors import InputDtypeError, InputShapeError
from seqssm.layers import frozen_weights
from seqssm.layers.base import check_lengths, check_steps, mask_outputs
from seqssm.models.config import SequenceModelConfig
from seqssm.models.decoding import decode
from seqssm.models.hub import push_to_hub, save_pretrained
from seqssm.models.reading import load_pretrained
from seqssm.models.registry import model_config
from seqssm.ops.checks import check_flags, check_floating, holds


def check_temperature(temperature, name: str = "temperature") -> float:
    """A sampling temperature: a finite number >= 0 (0: greedy). A negative one would sample the inverted
    distribution, so it is refused like any other bad value."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"{name} must be a number >= 0 (0: greedy), got {temperature!r}")
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"{name} must be a finite number >= 0 (0: greedy), got {temperature!r}")
    return float(temperature)


def check_top_k(top_k, name: str = "top_k") -> int | None:
    """None (sample from every token) or an int >= 1 (sample from the top_k most likely)."""
    if top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise TypeError(f"{name} must be None (no cut) or an int >= 1, got {top_k!r}")
    if top_k < 1:
        raise ValueError(f"{name} must be None (no cut) or an int >= 1, got {top_k}")
    return top_k


def check_max_new_tokens(max_new_tokens, name: str = "max_new_tokens") -> int:
    """The number of tokens to generate: an int >= 0."""
    try:
        n = None if isinstance(max_new_tokens, bool) else operator.index(max_new_tokens)
    except TypeError:
        n = None
    if n is None:
        raise TypeError(f"{name} must be an int >= 0, got {max_new_tokens!r}")
    if n < 0:
        raise ValueError(f"{name} must be an int >= 0, got {n}")
    return n


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, generator=None) -> torch.Tensor:
    """Next tokens (B,) from logits (B, V): greedy at temperature 0, else softmax(logits / T) over the top_k
    (temperature >= 0, top_k None or >= 1; others are refused)."""
    temperature, top_k = check_temperature(temperature), check_top_k(top_k)
    check_floating("sample_next", logits=logits)
    if logits.ndim != 2:
        raise InputShapeError(f"sample_next: logits must be (batch, vocab), got {tuple(logits.shape)}")
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits.float(), dim=-1), 1, generator=generator).squeeze(-1)


class SequenceModel(nn.Module):
    """Deep SSM over token ids (B, L) long (vocab_size) or numbers (B, L, d_input) float: `SequenceModel(config)`.

    With `pooling` ("mean" over valid tokens, "last" valid token, "cls": a learned token inserted
    right after each sequence's last valid token, whose output is taken) and `n_classes`: a
    classifier, forward -> (B, n_classes). With pooling None: per-token outputs (B, L, n_classes),
    or with no n_classes a language model, (B, L, vocab_size), with `generate`.

    `config` (a `SequenceModelConfig`) says everything: widths, the block ("mamba": pre-RMSNorm, residual,
    final norm; "simple": post-LayerNorm) and its SSP (any layer of `seqssm.layers.LAYERS`). `model.config` is
    that object; `from_config` also takes its dict forms (config.json, checkpoints).
    `backbone` is the BlockStack (blocks + final norm) on embedded inputs (B, L, d_model): drive it
    directly to feed your own encodings.
    `provenance` (None, or the `seqssm.models.hub.provenance_record` of the surgery / init_from that made the
    weights) travels with saved folders and task checkpoints. `from_pretrained` reads folders, task checkpoints and Hub ids.
    """

    def __init__(self, config: SequenceModelConfig):
        super().__init__()
        if not isinstance(config, SequenceModelConfig):
            raise TypeError(f"SequenceModel takes a SequenceModelConfig, got {type(config).__name__}; "
                            "SequenceModel.from_config reads dicts, seqssm.models.build named models")
        c = config
        if (c.vocab_size is None) == (c.d_input is None):
            raise ValueError("give exactly one of vocab_size (token ids) and d_input (numeric inputs)")
        if c.pooling is not None and c.n_classes is None:
            raise ValueError(f"pooling={c.pooling!r} makes a sequence classifier and needs n_classes")
        if c.is_lm and c.vocab_size is None:
            raise ValueError("a language-model head needs vocab_size (or give n_classes for per-token outputs)")
        if c.tie_embeddings and not c.is_lm:
            raise ValueError("tie_embeddings ties the language-model head to the token embedding; this model has neither")
        self.config = config
        self.vocab_size, self.n_classes, self.pooling, self.is_lm = c.vocab_size, c.n_classes, c.pooling, c.is_lm
        self.provenance: dict | None = None

        if c.vocab_size is not None:
            padded = math.ceil(c.vocab_size / c.pad_vocab_size_multiple) * c.pad_vocab_size_multiple
            self.embedding = nn.Embedding(padded, c.d_model)
            # GPT / mamba_ssm scale: with a tied head, unit-variance rows would start the logits at std ~ sqrt(d).
            nn.init.normal_(self.embedding.weight, std=0.02)
        else:
            self.embedding = nn.Linear(c.d_input, c.d_model)
        self.cls_token = nn.Parameter(torch.randn(c.d_model) * 0.02) if c.pooling == "cls" else None
        self.backbone = make_stack(c.block, c.d_model, c.n_layers, attn_layer_idx=c.attn_layer_idx, attn=c.attn)
        if c.is_lm:
            self.head = nn.Linear(c.d_model, self.embedding.num_embeddings, bias=False)
            if c.tie_embeddings:
                self.head.weight = self.embedding.weight
        else:
            self.head = nn.Linear(c.d_model, c.n_classes)

    @classmethod
    def from_config(cls, config: SequenceModelConfig | dict) -> "SequenceModel":
        """The model (freshly initialised) that `config` describes: a SequenceModelConfig, or a dict of one
        (`SequenceModelConfig.from_dict`: nested, or the flat form of earlier versions)."""
        return cls(config if isinstance(config, SequenceModelConfig) else SequenceModelConfig.from_dict(config))

    @classmethod
    def from_pretrained(cls, path, dtype: torch.dtype | None = None, revision: str | None = None,
                        cache_dir=None) -> "SequenceModel":
        """The model stored in a seqssm, Hugging Face Mamba or mamba_ssm folder, a task checkpoint of `seqssm fit`,
        or a Hub id ("org/name": a local folder of that name wins; else fetched once at `revision` into the
        Hugging Face cache, `cache_dir` when given, and read from there offline): `seqssm.models.reading`.
        Returned in eval mode (dropout off), as Hugging Face's from_pretrained; call `.train()` to finetune it
        (Lightning's fit sets train mode itself)."""
        return load_pretrained(path, cls, dtype=dtype, revision=revision, cache_dir=cache_dir).eval()

    def save_pretrained(self, out_dir, format: str = "seqssm", overwrite: bool = False, card: dict | None = None):
        """Write this model as a seqssm folder, or with format="hf" one transformers' MambaForCausalLM loads, with a
        model card README.md (`card`: its task, datasets, metrics); a non-empty `out_dir` is refused unless
        `overwrite` (`seqssm.models.hub.save_pretrained`)."""
        return save_pretrained(self, out_dir, format=format, overwrite=overwrite, card=card)

    def push_to_hub(self, repo_id: str, format: str = "seqssm", private: bool | None = None,
                    revision: str | None = None, card: dict | None = None, token: str | None = None) -> str:
        """Upload this model as a model folder (`save_pretrained`) to the Hub repository `repo_id`, created when
        missing, on branch `revision`; returns the commit URL (`seqssm.models.hub.push_to_hub`)."""
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            folder = self.save_pretrained(Path(tmp) / "model", format=format, card=card)
            return push_to_hub(folder, repo_id, private=private, revision=revision, token=token)

    @property
    def causal(self) -> bool:
        return self.backbone.causal

    def _check_inputs(self, inputs: torch.Tensor, where: str, name: str = "inputs", step: bool = False) -> None:
        """Token ids (B, L) integer in [0, vocab_size), or numbers (B, L, d_input) floating; one step drops L."""
        where = f"SequenceModel.{where}"
        if isinstance(self.embedding, nn.Embedding):
            layout = "(batch,)" if step else "(batch, L)"
            if not isinstance(inputs, torch.Tensor) or inputs.is_floating_point() or inputs.is_complex() \
                    or inputs.dtype == torch.bool:
                got = inputs.dtype if isinstance(inputs, torch.Tensor) else type(inputs).__name__
                raise InputDtypeError(f"{where}: {name} must be integer token ids {layout} (torch.long), got {got}")
            if inputs.ndim != (1 if step else 2):
                hint = f": for one sequence pass {name}[None]" if inputs.ndim == 1 and not step else ""
                raise InputShapeError(f"{where}: {name} must be token ids {layout}, "
                                      f"got shape {tuple(inputs.shape)}{hint}")
            if inputs.numel():
                low, high = torch.aminmax(inputs)
                in_range = f"{where}: {name} must lie in [0, vocab_size) = [0, {self.vocab_size})"
                if not holds((low >= 0) & (high < self.vocab_size), in_range):
                    raise ValueError(f"{in_range}, got ids from {int(low)} to {int(high)}")
        else:
            check_floating(where, **{name: inputs})
            d_input = self.embedding.in_features
            layout = "(batch, d_input)" if step else "(batch, L, d_input)"
            if inputs.ndim != (2 if step else 3) or inputs.shape[-1] != d_input:
                raise InputShapeError(f"{where}: {name} must be {layout} = {layout.replace('d_input', str(d_input))}, "
                                      f"got {tuple(inputs.shape)}")

    def _lengths(self, inputs: torch.Tensor, lengths, mask) -> torch.Tensor | None:
        """lengths (B,) or a right-padding mask (B, L) (bool, or integer 0/1) -> lengths (B,) long, or None."""
        batch, length = inputs.shape[:2]
        if mask is not None:
            if lengths is not None:
                raise ValueError("SequenceModel.forward: give lengths or mask, not both")
            mask = check_flags("SequenceModel.forward", "mask", mask, batch, length)
            lengths = mask.sum(1)
            right_padded = "mask must mark right-padded sequences: True for the first lengths[b] positions only"
            if not holds((mask == (torch.arange(length, device=mask.device) < lengths[:, None])).all(), right_padded):
                raise ValueError(right_padded)
        lengths = check_lengths("SequenceModel.forward", lengths, batch, length)
        if self.pooling is not None:
            if length == 0:
                raise InputShapeError(f"SequenceModel.forward: pooling={self.pooling!r} classifies whole sequences "
                                      "and needs at least one token each, got an empty sequence (L = 0)")
            one_token = f"SequenceModel.forward: pooling={self.pooling!r} needs at least one token per sequence"
            if lengths is not None and lengths.numel() and not holds((lengths >= 1).all(), one_token):
                raise ValueError(f"{one_token}; lengths holds 0 at rows {torch.nonzero(lengths < 1).flatten().tolist()}")
        return None if lengths is None else lengths.to(device=inputs.device, dtype=torch.long)

    def embed(self, inputs: torch.Tensor) -> torch.Tensor:
        """Token ids (B, L) long or numbers (B, L, d_input) -> (B, L, d_model); also one step (B,) / (B, d_input).
        Numbers of any floating dtype are read in the model's (float64 observations from numpy, say)."""
        if inputs.is_floating_point():
            inputs = inputs.to(self.embedding.weight.dtype)
        return self.embedding(inputs)

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        out = self.head(h)
        return out[..., : self.vocab_size] if self.is_lm else out

    def features(self, inputs: torch.Tensor, lengths: torch.Tensor | None = None, mask: torch.Tensor | None = None):
        """Inputs (B, L) or (B, L, d_input), lengths (B,) or mask (B, L) -> (B, L, d_model) after the final norm."""
        self._check_inputs(inputs, "features")
        lengths = self._lengths(inputs, lengths, mask)
        return self.backbone(self.embed(inputs), lengths=lengths)

    def forward(self, inputs: torch.Tensor, lengths: torch.Tensor | None = None, mask: torch.Tensor | None = None):
        """Inputs (B, L) ids or (B, L, d_input), right padding given by lengths (B,) or mask (B, L) bool (True = valid)
        -> (B, n_classes) when pooling is set, else (B, L, vocab_size or n_classes)."""
        self._check_inputs(inputs, "forward")
        lengths = self._lengths(inputs, lengths, mask)
        x = self.embed(inputs)
        batch, length = x.shape[:2]
        if self.pooling == "cls":
            end = torch.full((batch,), length, device=x.device) if lengths is None else lengths
            x = torch.cat([x, x.new_zeros(batch, 1, x.shape[-1])], dim=1)
            at_end = (torch.arange(length + 1, device=x.device) == end[:, None]).unsqueeze(-1)
            x = torch.where(at_end, self.cls_token.to(x.dtype), x)
            h = self.backbone(x, lengths=end + 1)
            return self._head(h[torch.arange(batch, device=x.device), end])
        h = self.backbone(x, lengths=lengths)
        if self.pooling is None:
            return self._head(h)
        if self.pooling == "mean":
            if lengths is None:
                pooled = h.mean(1)
            else:
                valid = (torch.arange(length, device=x.device) < lengths[:, None]).unsqueeze(-1)
                pooled = (h * valid).sum(1) / lengths.clamp(min=1)[:, None].to(h.dtype)
        else:  # "last"
            pooled = h[:, -1] if lengths is None else h[torch.arange(batch, device=x.device), lengths - 1]
        return self._head(pooled)

    def scan(self, inputs: torch.Tensor, state=None, resets: torch.Tensor | None = None,
             mask: torch.Tensor | None = None):
        """Causal models: raw inputs (B, L) or (B, L, d_input), backbone state (or None), resets / mask (B, L)
        bool -> (per-token head outputs (B, L, vocab_size or n_classes), state). No pooling: these are the
        outputs "last" pooling would give at every position. Masked steps leave the state unchanged and output zeros."""
        self._check_inputs(inputs, "scan")
        resets, mask = check_steps(inputs, resets, mask, where="SequenceModel.scan")
        h, state = self.backbone.scan(self.embed(inputs), state, resets, mask)
        return mask_outputs(mask, self._head(h)), state

    def step(self, input_t: torch.Tensor, state=None):
        """Causal models: one input (B,) ids or (B, d_input), state (None: zeros) -> (head output (B, vocab_size or
        n_classes), state)."""
        self._check_inputs(input_t, "step", "input_t", step=True)
        return self._step(input_t, state)

    def _step(self, input_t: torch.Tensor, state):
        h, state = self.backbone.step(self.embed(input_t), state)
        return self._head(h), state

    def initial_state(self, batch_size: int, device=None, dtype=None):
        """The backbone's zero state: a tuple with one state per block."""
        return self.backbone.initial_state(batch_size, device=device, dtype=dtype)

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        cuda_graph: bool = False,
    ) -> torch.Tensor:
        """Prompt ids (B, L) -> (B, L + max_new_tokens): the prompt is scanned once, then each new token
        costs one `step` on the fixed-size state (the KV cache of attention layers grows by one step per token).
        temperature 0 is greedy. Put the model in eval mode first.

        input_ids: integer ids in [0, vocab_size), shape (batch, L) with L >= 1 (a 1-D prompt is refused, not
        guessed to be batch 1: pass input_ids[None]); batch 0 gives (0, L + max_new_tokens). max_new_tokens >= 0,
        temperature >= 0, top_k None or >= 1. cuda_graph (a model on CUDA): replay one decoding step, recorded as a
        CUDA graph, per token (`seqssm.models.decoding`); the same tokens, less launch overhead. The model keeps the
        graph for its next call and records anew where the batch, dtypes, weights (moved or updated) or autocast
        differ; it lives as long as the model.
        """
        if not self.is_lm:
            raise ValueError("generate needs a language model (vocab_size, no n_classes, pooling None)")
        if not self.causal:
            raise ValueError("generate needs a causal model; a bidirectional one sees the tokens it would predict")
        max_new_tokens = check_max_new_tokens(max_new_tokens)
        temperature, top_k = check_temperature(temperature), check_top_k(top_k)
        self._check_inputs(input_ids, "generate", "input_ids")
        if not isinstance(cuda_graph, bool):
            raise TypeError(f"cuda_graph must be True or False, got {cuda_graph!r}")
        if cuda_graph and self.config.attn_layer_idx:
            raise ValueError("cuda_graph=True replays one graph on fixed-size states; the KV cache of this model's "
                             f"attention layers (attn_layer_idx {self.config.attn_layer_idx}) grows by one step per "
                             "token: generate without cuda_graph")
        if cuda_graph and input_ids.device.type != "cuda":
            raise ValueError(f"cuda_graph=True replays CUDA graphs: it needs the model and input_ids on a CUDA device, "
                             f"got input_ids on {input_ids.device}")
        batch, length = input_ids.shape
        if length == 0:
            raise InputShapeError(f"SequenceModel.generate: input_ids {tuple(input_ids.shape)} holds no prompt: give "
                                  "at least one token per sequence (e.g. a start-of-text id) to condition on")
        if batch == 0:
            return input_ids.new_empty(0, length + max_new_tokens)
        # Only the last position's logits are needed: a (B, L, vocab) head output would cost L times more.
        h, state = self.backbone.scan(self.embed(input_ids))
        with frozen_weights():
            tokens = decode(self, self._head(h[:, -1]), state, max_new_tokens,
                            lambda logits: sample_next(logits, temperature, top_k, generator), static=cuda_graph)
        return torch.cat([input_ids, *tokens], dim=1)


def build(name: str, *, vocab_size=None, d_input=None, n_classes=None, **overrides) -> SequenceModel:
    """The named thesis model for a task: token ids (vocab_size) or numbers (d_input); n_classes for a classifier
    (mean pooling unless pooling= says otherwise), none for a language model. overrides: any field of
    SequenceModelConfig, or of its block and SSP by name (d_state=8, dropout=0.0, ...; see `model_config`)."""
    return SequenceModel(model_config(name, vocab_size=vocab_size, d_input=d_input, n_classes=n_classes, **overrides))
