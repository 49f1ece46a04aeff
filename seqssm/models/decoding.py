"""Token-by-token decoding of a causal SequenceModel, eagerly or replaying one CUDA graph per token.

Decoding a small model is bound by launch overhead: every token runs each block's step (a few dozen small
kernels per block) from Python. `StaticDecoder` runs the whole step (embedding, every block's step, final norm,
head) on tensors that stay at one address, so that CUDA can record it once as a graph and replay that graph per
token, the idea of mamba_ssm's CUDA-graph decoding (Gu, Dao, "Mamba: Linear-Time Sequence Modeling with Selective
State Spaces", 2023, and its reference implementation). Sampling stays outside the graph, in `sample_next`, so a
graph decode draws from the same generator in the same order as the eager one and gives the same tokens.

A model keeps its last recorded decoder for the next call, as mamba_ssm keeps its decoding cache: a new one costs an
eager first step, two eager warm-up steps and a capture, each eager step as long as many replays. A later call
replays it from its first step where nothing the recording depends on has changed (`_recording`): the weights'
addresses and versions, the state's layout, autocast, float32 matmul precision, deterministic algorithms, the
backend choice, train / eval mode and inference mode. Otherwise it records anew.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import weakref

import torch

from seqssm.layers.base import frozen_systems


def _tensors(state) -> list[torch.Tensor]:
    """The tensors of a (nested tuple / list) state, in order."""
    if isinstance(state, (tuple, list)):
        return [t for part in state for t in _tensors(part)]
    return [state]


def _clone(state):
    """A copy of a nested state with every tensor cloned, structure kept."""
    if isinstance(state, (tuple, list)):
        return type(state)(_clone(part) for part in state)
    return state.clone()


@contextlib.contextmanager
def _sync_check(enabled: bool):
    """Inside (when enabled), an operation that makes the CPU wait for the GPU raises a RuntimeError."""
    if not enabled:
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    except RuntimeError as err:
        if "synchroniz" not in str(err):
            raise
        raise RuntimeError(f"cuda_graph=True: a decoding step of this model makes the CPU wait for the GPU ({err}), so "
                           "it cannot be captured as a CUDA graph; generate without cuda_graph") from err
    finally:
        torch.cuda.set_sync_debug_mode(previous)


class StaticDecoder:
    """One decoding step of `model` on fixed tensors: `decoder(tokens)` takes ids (B,) and returns the logits (B,
    vocab_size) of the next token, advancing its own copy of `state` (the model's state after some tokens) in place.

    After `capture()` (the state on a CUDA device) each call replays one CUDA graph of the step. Without it the
    same step runs eagerly: the code path the graph records, testable on any device. The logits returned are
    overwritten by the next call. The state's dtypes must be the ones `model.step` returns (those of a state
    after one step), so that writing the next state back into them changes no value.
    """

    def __init__(self, model, state):
        # Weakly: a model's kept decoder (`_KEPT`) must not keep the model alive.
        self._model = weakref.ref(model)
        self.state = _clone(state)
        self._buffers = _tensors(self.state)
        batch = self._buffers[0].shape[0]
        self.tokens = torch.zeros(batch, dtype=torch.long, device=self._buffers[0].device)
        self.logits: torch.Tensor | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self._systems: dict | None = None

    def load(self, state) -> None:
        """Copy `state` (of the buffers' shapes and dtypes) into the buffers: the next call steps from it."""
        for buffer, value in zip(self._buffers, _tensors(state), strict=True):
            buffer.copy_(value)

    def _run(self) -> torch.Tensor:
        """The step on the buffers: logits of `tokens`, and the next state written over the old one."""
        logits, state = self._model()._step(self.tokens, self.state)
        new = _tensors(state)
        if len(new) != len(self._buffers) or any(
                n.shape != b.shape or n.dtype != b.dtype for n, b in zip(new, self._buffers)):
            raise RuntimeError(
                "StaticDecoder: the model's step returned a state of other shapes or dtypes than it was given "
                f"({[(tuple(t.shape), t.dtype) for t in new]} for {[(tuple(t.shape), t.dtype) for t in self._buffers]}); "
                "give it a state that came out of one step")
        # One multi-tensor copy (a launch or two per dtype on CUDA) instead of one launch per state tensor: in a
        # graph of small kernels, every launch costs about as much as a layer's matrix products.
        torch._foreach_copy_(self._buffers, new)
        return logits

    def capture(self, warmups: int = 2) -> None:
        """Record the step as a CUDA graph, after `warmups` (>= 1) eager runs on a side stream (they allocate
        workspaces and fill the weight caches of `frozen_weights`, which a capture may not do); the state is restored
        afterwards. A step that waits for the GPU (reads a value on the CPU) cannot be recorded: the last warm-up
        runs with CUDA's sync check on and refuses it, before a failed capture could leave CUDA unusable."""
        saved = _clone(self.state)
        side = torch.cuda.Stream(device=self.tokens.device)
        side.wait_stream(torch.cuda.current_stream(self.tokens.device))
        with torch.cuda.stream(side):
            for i in range(warmups):
                with _sync_check(i + 1 == warmups):
                    self._run()
        torch.cuda.current_stream(self.tokens.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                logits = self._run()
        except RuntimeError as err:
            raise RuntimeError(f"cuda_graph=True: one decoding step of this model could not be captured as a CUDA "
                               f"graph ({err}); generate without cuda_graph") from err
        # The graph reads the frozen systems the warm-ups built by address: they must live as long as it does.
        self.graph, self.logits, self._systems = graph, logits, frozen_systems()
        self.load(saved)

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        self.tokens.copy_(tokens)
        if self.graph is None:
            self.logits = self._run()
        else:
            self.graph.replay()
        return self.logits


_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (recording, its last StaticDecoder)


def _recording(model, state) -> tuple:
    """What a recorded step depends on beside its buffers' values. The weights' addresses and version counters change
    with `.to()`, a swapped parameter, an optimizer step or `load_state_dict`: the graph reads weights by address and
    holds the systems `frozen_weights` built from them. Autocast, float32 matmul precision, deterministic algorithms,
    the backend choice and train / eval mode pick the kernels it recorded. Buffers made under inference mode cannot be written outside it."""
    device = _tensors(state)[0].device
    # Inference tensors keep no version counter: a weight made under inference mode is keyed by its address alone.
    return (tuple((t.data_ptr(), None if t.is_inference() else t._version)
                  for t in itertools.chain(model.parameters(), model.buffers())),
            tuple((t.shape, t.dtype, t.device) for t in _tensors(state)),
            torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type),
            torch.get_float32_matmul_precision(), torch.are_deterministic_algorithms_enabled(),
            os.environ.get("SEQSSM_BACKEND"), model.training, torch.is_inference_mode_enabled())


def _kept(model, state, recording: tuple) -> StaticDecoder | None:
    """The decoder `model` kept from an earlier call, loaded with `state`, if it was kept for `recording` (state's
    `_recording`)."""
    kept, decoder = _KEPT.get(model, (None, None))
    if decoder is None or kept != recording:
        return None
    decoder.load(state)
    return decoder


def _static_decoder(model, state) -> StaticDecoder:
    """A decoder stepping from `state` (one that came out of a step): the kept one if it still holds, else a new one,
    recorded as a CUDA graph when the state is on CUDA and kept for later calls."""
    recording = _recording(model, state)
    decoder = _kept(model, state, recording)
    if decoder is None:
        _KEPT.pop(model, None)  # free the old graph's memory before recording another
        decoder = StaticDecoder(model, state)
        if decoder.tokens.is_cuda:
            decoder.capture()
        _KEPT[model] = recording, decoder
    return decoder


def decode(model, logits: torch.Tensor, state, max_new_tokens: int, sample, static: bool = False) -> list[torch.Tensor]:
    """Tokens [(B, 1)] * max_new_tokens continuing a prompt whose last logits (B, vocab) and state are given: sample(
    logits) picks each token, then one step gives the next logits. `static`: the steps run in a `StaticDecoder`,
    replayed as a CUDA graph when the state is on CUDA. A decoder kept from an earlier call serves from the first
    step where its buffers take the prompt's state as it is; a new one is built after one eager step, since a
    prompt's state may be narrower than the state a step returns."""
    tokens, decoder = [], None
    for i in range(max_new_tokens):
        nxt = sample(logits)
        tokens.append(nxt[:, None])
        if i + 1 == max_new_tokens:
            break
        if static and decoder is None and i <= 1:
            decoder = _kept(model, state, _recording(model, state)) if i == 0 else _static_decoder(model, state)
        if decoder is None:
            logits, state = model._step(nxt, state)  # ids it sampled itself: no range check
        else:
            logits = decoder(nxt)
    return tokens
