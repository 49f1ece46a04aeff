"""seqssm.models.decoding: the fixed-buffer decoding step equals the eager one (on any device), and its CUDA graph
replays give the tokens of eager decoding (on CUDA)."""

import collections
import gc
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from seqssm.layers import frozen_weights
from seqssm.models import build, sample_next
from seqssm.models import decoding
from seqssm.models.decoding import StaticDecoder, _tensors, decode

VOCAB = 13
NAMES = ["mamba-s6", "simple-s4d", "mamba-s6-rope", "mamba-s4d-placebo"]


def tiny(name, dtype=torch.float64, device="cpu"):
    torch.manual_seed(0)
    return build(name, vocab_size=VOCAB, d_model=8, n_layers=2, d_state=4, dropout=0.0).to(device, dtype).eval()


def prefill(model, prompt):
    """The prompt's last logits and state, as `generate` computes them."""
    h, state = model.backbone.scan(model.embed(prompt))
    return model._head(h[:, -1]), state


@pytest.mark.parametrize("name", NAMES)
@torch.no_grad()
def test_static_steps_equal_eager_steps(name):
    model = tiny(name)
    prompt = torch.randint(0, VOCAB, (3, 5))
    ids = torch.randint(0, VOCAB, (3, 6))
    with frozen_weights():
        logits, state = prefill(model, prompt)
        logits, state = model._step(ids[:, 0], state)  # a state that came out of one step
        decoder = StaticDecoder(model, state)
        for t in range(1, ids.shape[1]):
            logits, state = model._step(ids[:, t], state)
            torch.testing.assert_close(decoder(ids[:, t]), logits, rtol=0, atol=0)
        for mine, theirs in zip(_tensors(decoder.state), _tensors(state), strict=True):
            torch.testing.assert_close(mine, theirs, rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("temperature,top_k", [(0.0, None), (1.0, None), (0.8, 3)])
@torch.no_grad()
def test_static_decoding_gives_the_eager_tokens(name, temperature, top_k):
    model = tiny(name)
    prompt = torch.randint(0, VOCAB, (2, 4))
    runs = {}
    for static in (False, True):
        generator = torch.Generator().manual_seed(5)
        with frozen_weights():
            logits, state = prefill(model, prompt)
            runs[static] = torch.cat(decode(model, logits, state, 9,
                                            lambda x: sample_next(x, temperature, top_k, generator), static=static), 1)
    assert runs[True].shape == (2, 9)
    assert torch.equal(runs[True], runs[False])
    eager = model.generate(prompt, 9, temperature, top_k, generator=torch.Generator().manual_seed(5))
    assert torch.equal(eager[:, 4:], runs[False])


@torch.no_grad()
def test_a_state_of_other_dtypes_than_a_step_returns_is_refused():
    """A prompt's state may be narrower or wider than what a step returns: writing the next state back into it would
    round it, so the decoder refuses it (decode runs the first step eagerly for this reason)."""
    model = tiny("mamba-s6", dtype=torch.float32)
    logits, state = prefill(model, torch.randint(0, VOCAB, (2, 4)))
    wide = tuple(tuple(t.double() for t in block) for block in state)
    with pytest.raises(RuntimeError, match="returned a state of other shapes or dtypes"):
        StaticDecoder(model, wide)(torch.zeros(2, dtype=torch.long))


def static_tokens(model, prompt, new_tokens=7, seed=5):
    """Sampled tokens of a static decode from the prompt, and how many steps the StaticDecoder served."""
    served = collections.Counter()
    call = StaticDecoder.__call__

    def counted(self, tokens):
        served[self] += 1  # the decoder itself: an id could be reused once the old one is freed
        return call(self, tokens)

    generator = torch.Generator().manual_seed(seed)
    with frozen_weights(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(StaticDecoder, "__call__", counted)
        logits, state = prefill(model, prompt)
        tokens = decode(model, logits, state, new_tokens, lambda x: sample_next(x, 1.0, None, generator), static=True)
    return torch.cat(tokens, 1), served


def eager_tokens(model, prompt, new_tokens=7, seed=5):
    return model.generate(prompt, new_tokens, 1.0, generator=torch.Generator().manual_seed(seed))[:, prompt.shape[1]:]


@pytest.mark.parametrize("name", ["mamba-s6", "simple-s4d"])
@torch.no_grad()
def test_a_later_call_steps_from_its_first_token_in_the_decoder_the_model_kept(name):
    """The first call steps once eagerly and builds a decoder for the other steps; the next call, with the same
    batch, dtypes and weights, hands every step to that same decoder, and both give the eager tokens."""
    model, prompt = tiny(name), torch.randint(0, VOCAB, (2, 4))
    first, served = static_tokens(model, prompt)
    [(kept, steps)] = served.items()
    assert steps == 7 - 2  # step 1 eager, the last token needs no step
    again, served = static_tokens(model, prompt)
    assert dict(served) == {kept: 7 - 1}
    assert torch.equal(first, eager_tokens(model, prompt)) and torch.equal(again, first)


@torch.no_grad()
def test_a_changed_weight_batch_or_dtype_gets_a_new_decoder_with_the_eager_tokens():
    """What the kept decoder was built for changes: a weight updated in place (whose discretised system the decoder
    holds: S4D's), another batch size, another dtype. Each time the decoder is built anew from an eager first step
    and the tokens are those of eager decoding with the model as it now is."""
    model, prompt = tiny("simple-s4d"), torch.randint(0, VOCAB, (2, 4))
    _, served = static_tokens(model, prompt)
    kept = set(served)

    def check_rebuilt(prompt):
        tokens, served = static_tokens(model, prompt)
        assert len(served) == 1 and not set(served) & kept and sum(served.values()) == 7 - 2
        kept.update(served)
        assert torch.equal(tokens, eager_tokens(model, prompt))

    model.backbone.layers[0].ssp.log_dt.add_(0.5)
    check_rebuilt(prompt)
    check_rebuilt(torch.randint(0, VOCAB, (3, 4)))
    model.float()
    check_rebuilt(torch.randint(0, VOCAB, (3, 4)))


def test_inference_mode_and_an_inference_mode_model_get_their_own_decoders():
    """Buffers made under inference mode cannot be written outside it, so a call outside it after one inside it
    builds a new decoder; a model made under inference mode (its weights keep no version counter) decodes too."""
    model, prompt = tiny("mamba-s6"), torch.randint(0, VOCAB, (2, 4))
    with torch.inference_mode():
        inside, served_inside = static_tokens(model, prompt)
    with torch.no_grad():
        outside, served_outside = static_tokens(model, prompt)
    assert not set(served_inside) & set(served_outside)
    assert torch.equal(inside, outside) and torch.equal(outside, eager_tokens(model, prompt))
    with torch.inference_mode():
        model = tiny("mamba-s6")
        first, _ = static_tokens(model, prompt)
        again, served = static_tokens(model, prompt)
    assert torch.equal(first, again) and sum(served.values()) == 7 - 1


@torch.no_grad()
def test_the_kept_decoder_does_not_keep_its_model_alive():
    model = tiny("mamba-s6")
    static_tokens(model, torch.randint(0, VOCAB, (2, 4)))
    assert model in decoding._KEPT
    gc.collect()  # earlier tests' models
    ref, count = weakref.ref(model), len(decoding._KEPT)
    del model
    gc.collect()
    assert ref() is None and len(decoding._KEPT) == count - 1


class _Ops(TorchDispatchMode):
    """Counts the operators dispatched inside it by name (aten's and the custom ops'), views and metadata left out."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", [*NAMES, "simple-s4", "mamba-s4-rope", "mamba2-ssd"])
@torch.no_grad()
def test_a_decoding_step_reads_no_value_on_the_cpu(name):
    """What a CUDA graph cannot record: a step that reads a tensor's value on the CPU (on CUDA, a wait for the
    device). RoPE's step computes its few angles rather than sizing a table by the largest position."""
    model = tiny(name)
    with frozen_weights():
        _, state = prefill(model, torch.randint(0, VOCAB, (2, 5)))
        ops = _Ops()
        with ops:
            model._step(torch.randint(0, VOCAB, (2,)), state)
    assert not {"_local_scalar_dense", "item"} & set(ops.counts), ops.counts


@pytest.mark.parametrize("name", ["mamba-s6", "mamba2-ssd"])
@torch.no_grad()
def test_a_mamba_step_on_the_triton_backends_is_two_kernels_a_layer_and_the_torch_paths_logits(name, monkeypatch):
    """Where "auto" takes the Triton step kernels (CUDA; here interpreted): each block's step is one conv step (window,
    taps, bias, SiLU) and, in Mamba-S6, one S6 step with the SiLU(z) gate inside and out_proj adding the residual in
    its product, with no elementwise torch op left around them (Mamba-2's SSD step stays torch ops), and the decoder
    writes the whole next state back in one multi-tensor copy. The logits are the torch path's."""
    model = tiny(name, dtype=torch.float32)
    ids = torch.randint(0, VOCAB, (2, 6))
    with frozen_weights():
        logits, state = prefill(model, ids[:, :3])
        logits, state = model._step(ids[:, 3], state)
        decoder = StaticDecoder(model, state)
        expected, _ = model._step(ids[:, 4], state)
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        monkeypatch.setenv("SEQSSM_BACKEND", "triton")
        ops = _Ops()
        with ops:
            logits = decoder(ids[:, 4])
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    layers = len(model.backbone.layers)
    assert ops.counts["causal_conv1d_step_triton"] == layers
    assert ops.counts["selective_step_triton"] == (layers if name == "mamba-s6" else 0)
    assert ops.counts["_foreach_copy_"] == 1 and ops.counts["copy_"] == 1  # the state; the token
    assert "cat" not in ops.counts  # the conv's window
    if name == "mamba-s6":
        assert ops.counts["addmm"] == layers  # out_proj with the residual as its addend
        assert not {"add", "silu", "sigmoid", "sum", "exp", "softplus"} & set(ops.counts), ops.counts


@pytest.mark.gpu
@torch.no_grad()
def test_a_mamba_s6_block_step_launches_at_most_eight_kernels_beside_its_norm_on_cuda():
    """What a CUDA graph replays per layer and token, beside the RMSNorm's own kernels (one where torch fuses it):
    in_proj, the conv step, x_proj (cuBLAS may split its narrow product into a dot and a reduce), dt_proj, the S6
    step with its gate, and out_proj with the residual as its addend (addmm copies the addend into its output
    first). On an H100 in float32 that is all eight."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    model = tiny("mamba-s6", dtype=torch.float32, device="cuda")
    block = model.backbone.layers[0]
    x_t = torch.randn(2, block.d_model, device="cuda")

    def kernels(fn) -> int:
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(e.device_type == DeviceType.CUDA for e in prof.events())

    with frozen_weights():
        state = block.initial_state(2, device="cuda")
        assert kernels(lambda: block._step(x_t, state)) <= 8 + kernels(lambda: block.norm(x_t))


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("temperature,top_k", [(0.0, None), (1.0, 4)])
@torch.no_grad()
def test_cuda_graph_decoding_gives_the_eager_tokens(name, temperature, top_k):
    model = tiny(name, dtype=torch.float32, device="cuda")
    prompt = torch.randint(0, VOCAB, (3, 5), device="cuda")
    out = {}
    for graph in (False, True):
        generator = torch.Generator("cuda").manual_seed(11)
        out[graph] = model.generate(prompt, 12, temperature, top_k, generator=generator, cuda_graph=graph)
    assert torch.equal(out[True], out[False])


@pytest.mark.gpu
@torch.no_grad()
def test_a_captured_step_replays_the_eager_logits():
    model = tiny("mamba-s6", dtype=torch.float32, device="cuda")
    ids = torch.randint(0, VOCAB, (2, 8), device="cuda")
    with frozen_weights():
        logits, state = prefill(model, ids[:, :3])
        logits, state = model._step(ids[:, 3], state)
        decoder = StaticDecoder(model, state)
        decoder.capture()
        assert decoder.graph is not None
        for t in range(4, 8):
            logits, state = model._step(ids[:, t], state)
            torch.testing.assert_close(decoder(ids[:, t]), logits, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
@torch.no_grad()
def test_a_step_that_waits_for_the_gpu_is_refused_before_capture():
    """A step that reads a value on the CPU cannot be recorded: refused with a clear error, and CUDA stays usable
    (a failed capture would leave the random number generator unusable)."""
    model = tiny("mamba-s6", dtype=torch.float32, device="cuda")
    step = model._step

    def reads_on_the_cpu(tokens, state):
        int(tokens.max())
        return step(tokens, state)

    model._step = reads_on_the_cpu
    with frozen_weights():
        logits, state = prefill(model, torch.randint(0, VOCAB, (2, 3), device="cuda"))
        logits, state = step(logits.argmax(-1), state)
        with pytest.raises(RuntimeError, match="makes the CPU wait for the GPU"):
            StaticDecoder(model, state).capture()
    assert torch.randint(0, VOCAB, (2,), device="cuda").shape == (2,)
    assert torch.cuda.get_sync_debug_mode() == 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["mamba-s6", "simple-s4d"])
@torch.no_grad()
def test_a_later_cuda_graph_call_replays_the_kept_graph_and_a_changed_weight_records_anew(name, monkeypatch):
    """The second call records nothing: it replays the first call's graph, which reads the discretised systems the
    first call's `frozen_weights` built. Those stay alive with the graph, so memory freed between the calls and
    filled with NaNs changes no token. After the weights change in place, a call records a new graph."""
    model = tiny(name, dtype=torch.float32, device="cuda")
    prompt = torch.randint(0, VOCAB, (3, 5), device="cuda")
    captures = []
    capture = StaticDecoder.capture

    def counted(self, *args, **kwargs):
        captures.append(self)
        return capture(self, *args, **kwargs)

    monkeypatch.setattr(StaticDecoder, "capture", counted)

    def generate(graph: bool) -> torch.Tensor:
        return model.generate(prompt, 12, 1.0, generator=torch.Generator("cuda").manual_seed(11), cuda_graph=graph)

    eager = generate(False)
    assert torch.equal(generate(True), eager) and len(captures) == 1
    nans = [torch.full((n,), float("nan"), device="cuda") for n in (4, 16, 32, 64, 128, 512) for _ in range(256)]
    assert torch.equal(generate(True), eager) and len(captures) == 1
    del nans
    for p in model.parameters():
        p.mul_(1.01)
    eager = generate(False)
    assert torch.equal(generate(True), eager) and len(captures) == 2
