"""SequenceModel: embedding -> block stack (+ final norm) -> pooling -> head (thesis 4.2.3, 12.1)."""

from __future__ import annotations

import math
import operator

import torch
import torch.nn.functional as F
from torch import nn

from seqssm.blocks.stack import make_stack
from seqssm.models.hub import load_pretrained, save_pretrained
from seqssm.layers import frozen_weights
from seqssm.layers.base import check_lengths, check_steps, mask_outputs
from seqssm.ops.checks import InputDtypeError, InputShapeError, check_flags, check_floating

POOLINGS = ("mean", "last", "cls", None)


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
    """Deep SSM over token ids (B, L) long (vocab_size) or numbers (B, L, d_input) float.

    With `pooling` ("mean" over valid tokens, "last" valid token, "cls": a learned token inserted
    right after each sequence's last valid token, whose output is taken) and `n_classes`: a
    classifier, forward -> (B, n_classes). With pooling None: per-token outputs (B, L, n_classes),
    or with no n_classes a language model, (B, L, vocab_size), with `generate`.

    block "mamba" (pre-RMSNorm, residual, final norm) or "simple" (post-LayerNorm); ssp "s6", "s4d", "s4"
    or any other layer of `seqssm.layers.LAYERS`.
    Every constructor argument is in `config`, which `from_config` turns back into the model.
    `backbone` is the BlockStack (blocks + final norm) on embedded inputs (B, L, d_model): drive it
    directly to feed your own encodings. Arguments that only a Mamba stack uses (expand, d_conv,
    conv_bias, proj_bias, dt_rank, bidirectional, placebo, residual_in_fp32) are ignored for "simple".
    residual_in_fp32 keeps each Mamba block's residual sum in float32 when the model runs in lower precision.
    `provenance` (None, or the `seqssm.models.hub.provenance_record` of the surgery / init_from that made the
    weights) travels with saved folders and task checkpoints. Task checkpoints and any folder load with `seqssm.models.loading.model_from_path`.
    """

    def __init__(
        self,
        d_model: int,
        n_layers: int = 6,
        block: str = "mamba",
        ssp: str = "s6",
        vocab_size: int | None = None,
        d_input: int | None = None,
        n_classes: int | None = None,
        pooling: str | None = "mean",
        d_state: int | None = None,
        expand: int = 2,
        d_conv: int = 4,
        conv_bias: bool = True,
        proj_bias: bool = False,
        dt_rank: int | str = "auto",
        dropout: float = 0.1,
        rope: dict | None = None,
        bidirectional: bool = False,
        placebo: bool = False,
        rms_norm: bool | None = None,
        norm_eps: float = 1e-5,
        residual_in_fp32: bool = False,
        tie_embeddings: bool = False,
        pad_vocab_size_multiple: int = 1,
        ssp_kwargs: dict | None = None,
    ):
        super().__init__()
        if (vocab_size is None) == (d_input is None):
            raise ValueError("give exactly one of vocab_size (token ids) and d_input (numeric inputs)")
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; choose one of {POOLINGS}")
        if pooling is not None and n_classes is None:
            raise ValueError(f"pooling={pooling!r} makes a sequence classifier and needs n_classes")
        is_lm = pooling is None and n_classes is None
        if is_lm and vocab_size is None:
            raise ValueError("a language-model head needs vocab_size (or give n_classes for per-token outputs)")
        if tie_embeddings and not is_lm:
            raise ValueError("tie_embeddings ties the language-model head to the token embedding; this model has neither")
        if block == "simple" and (bidirectional or placebo):
            raise ValueError("bidirectional and placebo are Mamba-block variants (thesis 15.2.1)")
        if d_state is None:
            d_state = 16 if block == "mamba" else 64
        if rms_norm is None:
            rms_norm = block == "mamba"
        if rope is not None:
            rope = {k: (list(v) if isinstance(v, tuple) else v) for k, v in rope.items()}
        self.config = dict(
            d_model=d_model, n_layers=n_layers, block=block, ssp=ssp, vocab_size=vocab_size, d_input=d_input,
            n_classes=n_classes, pooling=pooling, d_state=d_state, expand=expand, d_conv=d_conv, conv_bias=conv_bias,
            proj_bias=proj_bias, dt_rank=dt_rank, dropout=dropout, rope=rope, bidirectional=bidirectional,
            placebo=placebo, rms_norm=rms_norm, norm_eps=norm_eps, residual_in_fp32=residual_in_fp32,
            tie_embeddings=tie_embeddings, pad_vocab_size_multiple=pad_vocab_size_multiple, ssp_kwargs=ssp_kwargs,
        )
        self.vocab_size, self.n_classes, self.pooling, self.is_lm = vocab_size, n_classes, pooling, is_lm
        self.provenance: dict | None = None

        if vocab_size is not None:
            padded = math.ceil(vocab_size / pad_vocab_size_multiple) * pad_vocab_size_multiple
            self.embedding = nn.Embedding(padded, d_model)
            # GPT / mamba_ssm scale: with a tied head, unit-variance rows would start the logits at std ~ sqrt(d).
            nn.init.normal_(self.embedding.weight, std=0.02)
        else:
            self.embedding = nn.Linear(d_input, d_model)
        self.cls_token = nn.Parameter(torch.randn(d_model) * 0.02) if pooling == "cls" else None

        block_kwargs = dict(ssp=ssp, d_state=d_state, dropout=dropout, rope=rope, ssp_kwargs=ssp_kwargs)
        if block == "mamba":
            block_kwargs.update(
                expand=expand, d_conv=d_conv, conv_bias=conv_bias, proj_bias=proj_bias, dt_rank=dt_rank,
                bidirectional=bidirectional, placebo=placebo, residual_in_fp32=residual_in_fp32,
            )
        self.backbone = make_stack(block, d_model, n_layers, rms_norm=rms_norm, norm_eps=norm_eps, **block_kwargs)

        if is_lm:
            self.head = nn.Linear(d_model, self.embedding.num_embeddings, bias=False)
            if tie_embeddings:
                self.head.weight = self.embedding.weight
        else:
            self.head = nn.Linear(d_model, n_classes)

    @classmethod
    def from_config(cls, config: dict) -> "SequenceModel":
        """The model (freshly initialised) that `config` describes."""
        return cls(**config)

    @classmethod
    def from_pretrained(cls, path, dtype: torch.dtype | None = None) -> "SequenceModel":
        """The model stored in a seqssm, Hugging Face Mamba or mamba_ssm folder (`seqssm.models.hub`)."""
        return load_pretrained(path, cls, dtype=dtype)

    def save_pretrained(self, out_dir, format: str = "seqssm", overwrite: bool = False):
        """Write this model as a seqssm folder, or with format="hf" one transformers' MambaForCausalLM loads;
        a non-empty `out_dir` is refused unless `overwrite` (`seqssm.models.hub.save_pretrained`)."""
        return save_pretrained(self, out_dir, format=format, overwrite=overwrite)

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
                if low < 0 or high >= self.vocab_size:
                    raise ValueError(f"{where}: {name} must lie in [0, vocab_size) = [0, {self.vocab_size}), "
                                     f"got ids from {int(low)} to {int(high)}")
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
            if not torch.equal(mask, torch.arange(mask.shape[1], device=mask.device) < lengths[:, None]):
                raise ValueError("mask must mark right-padded sequences: True for the first lengths[b] positions only")
        lengths = check_lengths("SequenceModel.forward", lengths, batch, length)
        if self.pooling is not None:
            if length == 0:
                raise InputShapeError(f"SequenceModel.forward: pooling={self.pooling!r} classifies whole sequences "
                                      "and needs at least one token each, got an empty sequence (L = 0)")
            if lengths is not None and lengths.numel() and lengths.min() < 1:
                raise ValueError(f"SequenceModel.forward: pooling={self.pooling!r} needs at least one token per "
                                 f"sequence; lengths holds 0 at rows {torch.nonzero(lengths < 1).flatten().tolist()}")
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
    ) -> torch.Tensor:
        """Prompt ids (B, L) -> (B, L + max_new_tokens): the prompt is scanned once, then each new token
        costs one `step` on the fixed-size state. temperature 0 is greedy. Put the model in eval mode first.

        input_ids: integer ids in [0, vocab_size), shape (batch, L) with L >= 1 (a 1-D prompt is refused, not
        guessed to be batch 1: pass input_ids[None]); batch 0 gives (0, L + max_new_tokens). max_new_tokens >= 0,
        temperature >= 0, top_k None or >= 1.
        """
        if not self.is_lm:
            raise ValueError("generate needs a language model (vocab_size, no n_classes, pooling None)")
        if not self.causal:
            raise ValueError("generate needs a causal model; a bidirectional one sees the tokens it would predict")
        max_new_tokens = check_max_new_tokens(max_new_tokens)
        temperature, top_k = check_temperature(temperature), check_top_k(top_k)
        self._check_inputs(input_ids, "generate", "input_ids")
        batch, length = input_ids.shape
        if length == 0:
            raise InputShapeError(f"SequenceModel.generate: input_ids {tuple(input_ids.shape)} holds no prompt: give "
                                  "at least one token per sequence (e.g. a start-of-text id) to condition on")
        if batch == 0:
            return input_ids.new_empty(0, length + max_new_tokens)
        # Only the last position's logits are needed: a (B, L, vocab) head output would cost L times more.
        h, state = self.backbone.scan(self.embed(input_ids))
        logits, tokens = self._head(h[:, -1]), [input_ids]
        with frozen_weights():
            for i in range(max_new_tokens):
                nxt = sample_next(logits, temperature, top_k, generator)
                tokens.append(nxt[:, None])
                if i + 1 < max_new_tokens:
                    logits, state = self._step(nxt, state)  # ids it sampled itself: no range check
        return torch.cat(tokens, dim=1)
