"""torch.compile on every model family and on the RL cores: one graph, no graph break (forward under fullgraph=True,
then backward through the compiled graph), compiled outputs and gradients equal to eager ones, no recompilation for a
new length under dynamic shapes, and a compiled training run from the command line.

Tiny models (d_model 16, 2 layers, batch 2, L 40) in float64. aot_eager stands in for inductor where tracing is the
question (AOTAutograd traces forward and backward as inductor's does, without its C++ compile, which takes most of a
minute on 2 cores); the command-line run compiles with inductor, torch.compile's default.
"""

from __future__ import annotations

import logging

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters
from test_cli import workdir  # noqa: F401

from tasks.helpers import one_thread  # noqa: F401  (autouse: tiny models run on one thread)

import seqssm.ops.backend as backend_module
from seqssm.cli import main
from seqssm.models import SequenceModel, build

FAMILIES = (
    "simple-s4", "simple-s4d", "simple-s4-rope", "simple-s4d-rope",
    "mamba-s4", "mamba-s4d", "mamba-s6", "mamba-s4-bi", "mamba-s4d-bi", "mamba-s6-bi",
    "mamba-s4-rope", "mamba-s4d-rope", "mamba-s6-rope", "mamba2-ssd", "mamba2-ssd-bi",
)
# S4's kernel needs Ā^L, a matrix power whose squarings follow the bits of L: each new length is a new graph.
LENGTH_FIXED = ("simple-s4", "simple-s4-rope", "mamba-s4", "mamba-s4-bi", "mamba-s4-rope")
VOCAB, LENGTH = 10, 40  # a length no model width shares: dynamic shapes give equal sizes one symbol


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def graphs() -> int:
    """The graphs dynamo has installed since the test began (a restarted analysis counts once)."""
    return counters["stats"]["unique_graphs"]


def tiny(name: str):
    return build(name, vocab_size=VOCAB, n_classes=3, d_model=16, n_layers=2, dropout=0.0).double()


def assert_same_gradients(loss, loss_eager, params):
    for g, g_eager in zip(torch.autograd.grad(loss, params), torch.autograd.grad(loss_eager, params)):
        torch.testing.assert_close(g, g_eager, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", FAMILIES)
def test_a_model_family_compiles_to_one_graph_with_eager_outputs_and_gradients(name):
    model = tiny(name)
    ids = torch.randint(0, VOCAB, (2, LENGTH))
    explanation = torch._dynamo.explain(model)(ids)
    assert explanation.graph_break_count == 0, [str(b.reason).splitlines()[0] for b in explanation.break_reasons]
    torch._dynamo.reset()
    counters.clear()
    y = torch.compile(model, fullgraph=True, backend="aot_eager")(ids)
    y_eager = model(ids)
    assert graphs() == 1
    torch.testing.assert_close(y, y_eager, rtol=1e-10, atol=1e-12)
    assert_same_gradients(y.square().sum(), y_eager.square().sum(), list(model.parameters()))


def core(layer: str):
    pytest.importorskip("gymnasium", reason="seqssm.rl needs the rl extra: pip install 'seqssm[rl]'")
    from seqssm.rl.core import CoreConfig, build_core

    return build_core(CoreConfig(layer=layer, d_model=16, n_layers=2))


@pytest.mark.parametrize("layer", ["s5", "mingru"])
def test_an_rl_core_scan_with_resets_and_a_state_compiles_to_one_graph(layer):
    """The core's scan as PPO calls it (resets, a start state): one graph, eager's outputs, final state and gradients
    (the start state's too)."""
    scan = core(layer).double()
    x = torch.randn(2, LENGTH, 16, dtype=torch.float64)
    state = tuple(torch.randn_like(s).requires_grad_() for s in scan.initial_state(2))
    resets = torch.rand(2, LENGTH) < 0.2
    y, last = torch.compile(scan.scan, fullgraph=True, backend="aot_eager")(x, state, resets)
    y_eager, last_eager = scan.scan(x, state, resets)
    assert graphs() == 1
    torch.testing.assert_close((y, last), (y_eager, last_eager), rtol=1e-10, atol=1e-12)

    def loss(y, last):
        return y.square().sum() + sum(s.abs().square().sum() for s in last)

    assert_same_gradients(loss(y, last), loss(y_eager, last_eager), [*scan.parameters(), *state])


def test_a_hybrid_models_scan_from_its_kv_cache_compiles_to_one_graph():
    """A Mamba-2 stack with an attention layer (RoPE, conv over q, k, v): its scan from a state holding a KV cache,
    with resets, traces in one graph with eager's outputs, state and gradients."""
    model = build("mamba2-ssd", vocab_size=VOCAB, d_model=16, n_layers=2, dropout=0.0, d_state=8, attn_layer_idx=[1],
                  attn={"n_heads": 2, "rotary_dim": 4, "d_conv": 4},
                  block={"ssp": {"layer_kwargs": {"head_dim": 8, "chunk_size": 8}}}).double()
    with torch.no_grad():
        _, state = model.scan(torch.randint(0, VOCAB, (2, 5)))
    ids, resets = torch.randint(0, VOCAB, (2, LENGTH)), torch.rand(2, LENGTH) < 0.1
    y, last = torch.compile(model.scan, fullgraph=True, backend="aot_eager")(ids, state, resets)
    y_eager, last_eager = model.scan(ids, state, resets)
    assert graphs() == 1
    torch.testing.assert_close((y, last), (y_eager, last_eager), rtol=1e-10, atol=1e-12)
    assert_same_gradients(y.square().sum(), y_eager.square().sum(), list(model.parameters()))


@pytest.mark.parametrize("name", ["simple-s4d", "simple-s4d-rope", "mamba-s4d", "mamba-s6", "mamba-s6-bi",
                                  "mamba-s6-rope", "mamba2-ssd", "core-s5", "core-mingru"])
def test_dynamic_shapes_need_no_new_graph_for_a_new_length(name):
    """One layer kind, block and variant each (S4 aside: LENGTH_FIXED)."""
    if name.startswith("core-"):
        scan = core(name[len("core-"):])
        compiled = torch.compile(scan.scan, dynamic=True, fullgraph=True, backend="eager")
        for length in (LENGTH, 56, 23):
            compiled(torch.randn(2, length, 16), scan.initial_state(2), torch.rand(2, length) < 0.2)
    else:
        compiled = torch.compile(tiny(name), dynamic=True, fullgraph=True, backend="eager")
        for length in (LENGTH, 56, 23):
            compiled(torch.randint(0, VOCAB, (2, length)))
    assert graphs() == 1


def test_value_checks_hold_inside_the_graph():
    """Checks that read values (token ids in range) run as assertions in the compiled graph: no graph break, and bad
    input still fails, naming the rule."""
    model = tiny("mamba-s6")
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    compiled(torch.randint(0, VOCAB, (2, LENGTH)))
    with pytest.raises(RuntimeError, match=r"inputs must lie in \[0, vocab_size\) = \[0, 10\)"):
        compiled(torch.full((2, LENGTH), VOCAB))


def test_the_backend_choice_is_logged_once_when_the_first_call_is_compiled(caplog, monkeypatch):
    monkeypatch.setattr(backend_module, "_LOGGED", set())
    model = tiny("mamba-s6")
    with caplog.at_level(logging.INFO, logger="seqssm.ops"):
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        for _ in range(2):
            compiled(torch.randint(0, VOCAB, (2, LENGTH)))
        model(torch.randint(0, VOCAB, (2, LENGTH)))
    lines = [r.getMessage() for r in caplog.records if r.name == "seqssm.ops"]
    assert lines == ["seqssm.ops.causal_conv1d: using the 'torch' backend",
                     "seqssm.ops.selective_scan: using the 'torch' backend"]


def test_seqssm_fit_trains_a_compiled_model(workdir, capsys):  # noqa: F811
    """`--model.init_args.compile true`: inductor compiles the network, the run trains, and the checkpoint holds the
    plain network's weights."""
    main(["fit", "--config", "tiny.yaml", "--torch_threads", "1", "--model.init_args.compile", "true",
          "--trainer.max_steps", "3", "--trainer.limit_val_batches", "0"])
    last = workdir / "run" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == 3
    assert checkpoint["hyper_parameters"]["compile"] is True
    assert all(key.startswith(("model.", "metrics.")) for key in checkpoint["state_dict"]), "no compiled wrapper"
    SequenceModel.from_pretrained(last)  # loads as a plain SequenceModel
    assert graphs() >= 1, "the network ran compiled"


@pytest.mark.parametrize("value", ["yes", {"backend": "aot_eager", "fullgraf": True}])
def test_a_bad_compile_setting_names_the_field_and_the_choices(value):
    from seqssm.tasks import ConfigError
    from tasks.helpers import make_task

    with pytest.raises(ConfigError, match=r"compile must be true, false or a dict of torch.compile arguments "
                                          r"\(fullgraph, dynamic, backend, mode, options, disable\)"):
        make_task(compile=value)


def test_a_compile_setting_runs_the_task_network_compiled():
    """compile={backend: ...} goes to torch.compile (one graph by default); the task's outputs are the plain
    network's, and its state dict holds no compiled wrapper."""
    from tasks.helpers import TinyTokens, a_batch, make_task

    task = make_task(compile={"backend": "aot_eager"}).eval()
    batch = a_batch(TinyTokens())
    with torch.no_grad():
        logits = task(batch["inputs"], batch["lengths"])
        torch.testing.assert_close(logits, task.model(batch["inputs"], lengths=batch["lengths"]))
    assert graphs() == 1
    assert all(not key.startswith("_compiled") for key in task.state_dict())
