"""scripts/bench_models.py: a tiny CPU run writes a row for every contender of every part (its numbers or its error),
transformers' torch path is switched on and off, and generated tokens are compared step by step."""

from __future__ import annotations

import importlib.util
import inspect
import json
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).parents[2]

# A stand-in for the S4 authors' models/s4/s4d.py with its interface and its import from their repository's src/.
STAND_IN_PEER = '''
import torch
from torch import nn
from src.models.nn import DropoutNd


class S4D(nn.Module):
    def __init__(self, d_model, d_state=64, dropout=0.0, transposed=True, **kernel_args):
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(d_model, 1, 4) * 0.1)
        self.output_linear = nn.Sequential(nn.Conv1d(d_model, 2 * d_model, kernel_size=1), nn.GLU(dim=-2))

    def forward(self, u, **kwargs):
        L = u.shape[-1]
        y = nn.functional.conv1d(nn.functional.pad(u, (3, 0)), self.kernel, groups=u.shape[1])[..., :L]
        return self.output_linear(nn.functional.gelu(y)), None
'''


@pytest.fixture(scope="module")
def bench(load_script):
    return load_script("bench_models")


def test_a_tiny_cpu_run_has_every_contender(bench, tmp_path):
    peer = tmp_path / "s4d.py"
    peer.write_text(STAND_IN_PEER)
    bench.main(["--device", "cpu", "--size", "tiny", "--out", str(tmp_path / "out"), "--warmup", "0", "--rounds", "1",
                "--iters", "1", "--new-tokens", "3", "--gen-batches", "2", "--s4-peer", str(peer)])
    result = json.loads((tmp_path / "out" / "bench_models.json").read_text())
    assert (tmp_path / "out" / "bench_models.md").read_text().count("\n|") > 10
    expected = {
        "train": {bench.SEQSSM, bench.SEQSSM_TRITON, bench.MAMBA_SSM, bench.HF_KERNELS, bench.HF_TORCH},
        "s4d": {bench.S4D_SEQSSM, bench.S4D_PEER},
        "generate": {bench.SEQSSM, bench.SEQSSM_GRAPH, bench.MAMBA_SSM, bench.HF_KERNELS, bench.HF_TORCH},
    }
    for part, names in expected.items():
        rows = {r["contender"]: r for r in result[part]}
        assert set(rows) == names, part
        for row in rows.values():
            assert (row["error"] is None) == (row["tokens_per_s"] is not None), row
    # What runs on any CPU has numbers; what needs CUDA says so.
    for part, name in [("train", bench.SEQSSM), ("train", bench.HF_TORCH), ("s4d", bench.S4D_SEQSSM),
                       ("s4d", bench.S4D_PEER), ("generate", bench.SEQSSM), ("generate", bench.HF_TORCH)]:
        row = next(r for r in result[part] if r["contender"] == name)
        assert row["tokens_per_s"] > 0, row
    for part, name in [("train", bench.MAMBA_SSM), ("generate", bench.SEQSSM_GRAPH), ("generate", bench.HF_KERNELS)]:
        assert "needs a CUDA device" in next(r for r in result[part] if r["contender"] == name)["error"]
    # The same weights and greedy decoding: transformers' torch path gives seqssm's tokens.
    hf = next(r for r in result["generate"] if r["contender"] == bench.HF_TORCH)
    assert hf["compared"] and hf["first_divergence"] is None


def test_a_missing_peer_is_a_row_with_its_error(bench, tmp_path):
    missing = tmp_path / "nowhere" / "s4d.py"
    result = bench.main(["--device", "cpu", "--size", "tiny", "--parts", "s4d", "--out", str(tmp_path), "--warmup",
                         "0", "--rounds", "1", "--iters", "1", "--s4-peer", str(missing)])
    peer = next(r for r in result["s4d"] if r["contender"] == bench.S4D_PEER)
    assert f"{missing}: no such file" in peer["error"] and peer["tokens_per_s"] is None
    assert next(r for r in result["s4d"] if r["contender"] == bench.S4D_SEQSSM)["tokens_per_s"] > 0


def test_s4d_stacks_compare_at_one_float32_precision(bench):
    """Both contenders' products on TF32 or neither (torch's defaults differ for convolutions and matmuls), set
    and then restored; CUDA runs both precisions, the CPU (which has no TF32) one."""
    # torch's flags are properties of its backend modules, which monkeypatch cannot restore: set and restore by hand
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True  # torch's defaults
        for tf32 in (False, True):
            with bench.float32_products(tf32):
                assert torch.backends.cuda.matmul.allow_tf32 is tf32 and torch.backends.cudnn.allow_tf32 is tf32
            assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    assert bench.s4d_precisions(torch.device("cuda")) == ("float32", "tf32")
    assert bench.s4d_precisions(torch.device("cpu")) == ("float32",)
    row = {"contender": bench.S4D_SEQSSM, "batch": 2, "length": 8, "step_ms": 1.0, "tokens_per_s": 16000.0,
           "peak_mb": None, "error": None}
    result = {"environment": {k: "x" for k in ("device_name", "torch", "transformers", "mamba_ssm", "causal_conv1d")},
              "settings": {"size": "tiny", "rounds": 1}, "train": [],
              "s4d": [{**row, "precision": "float32"}, {**row, "precision": "tf32"}], "generate": []}
    text = bench.markdown(result)
    assert f"| {bench.S4D_SEQSSM} (float32) |" in text and f"| {bench.S4D_SEQSSM} (tf32) |" in text


def test_the_torch_path_swaps_in_transformers_own_functions_and_back(bench):
    import transformers.models.mamba.modeling_mamba as mm

    before = {name: getattr(mm, name) for name in bench.HF_KERNEL_FUNCTIONS}
    with bench.hf_torch_path():
        for name, fn in before.items():
            inside = getattr(mm, name)
            assert inside is inspect.unwrap(fn) and inside.__module__ == mm.__name__
    assert {name: getattr(mm, name) for name in bench.HF_KERNEL_FUNCTIONS} == before
    # Without mamba_ssm / causal_conv1d transformers binds its own functions, and the kernel row refuses to run.
    if not any(importlib.util.find_spec(p) for p in ("mamba_ssm", "causal_conv1d")):
        assert set(bench.hf_kernel_binding().values()) == {mm.__name__}


def test_first_divergence(bench):
    ref = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    assert bench.first_divergence(ref.clone(), ref) is None
    assert bench.first_divergence(torch.tensor([[1, 2, 3, 4], [5, 6, 0, 8]]), ref) == 2
    assert bench.first_divergence(ref[:, :3], ref) == 3  # stopped early


def test_mamba_ssm_weights_take_its_lm_keys(bench):
    """mamba_ssm's contender loads seqssm's weights under MambaLMHeadModel's keys (checked here, since the model
    itself needs CUDA): one key per tensor, the same tensors."""
    from seqssm.models import SequenceModel

    ours = SequenceModel(bench.seqssm_lm_config(bench.SIZES["tiny"]))
    weights = bench.mamba_ssm_weights(ours)
    own = ours.state_dict()
    assert len(weights) == len(own)
    assert {"backbone.embedding.weight", "backbone.norm_f.weight", "backbone.layers.1.mixer.A_log",
            "backbone.layers.0.mixer.in_proj.weight", "backbone.layers.0.norm.weight"} <= set(weights)
    assert sorted(t.data_ptr() for t in weights.values()) == sorted(t.data_ptr() for t in own.values())


@pytest.mark.parametrize("name,category", [
    ("void selective_scan_fwd_kernel<Selective_Scan_fwd_kernel_traits<32, 4, true, true, true, false, "
     "c10::BFloat16, float> >(SSMParamsBase)", "selective scan"),
    ("selective_scan_bwd", "selective scan"),
    ("void causal_conv1d_bwd_kernel<Causal_conv1d_bwd_kernel_traits<128, 4, true, true, c10::BFloat16, float> >"
     "(ConvParamsBwd)", "causal conv"),
    ("conv1d_fwd", "causal conv"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", "matmul"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "matmul"),
    ("_layer_norm_bwd_kernel", "norm"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
     "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)", "loss"),
    ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, "
     "float*, float const*, long const*, float const*, bool, long, long, long, long)", "loss"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "TensorListMetadata<5>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 5, "
     "(at::native::ADAM_MODE)1, false>>", "optimizer"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
     "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>", "copy"),
    ("Memcpy DtoD (Device -> Device)", "copy"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::sum_functor<float, float, float>::operator()>, unsigned int, float, 4, 4> >", "reduction"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >"
     "(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)", "elementwise"),
    ("void at::native::embedding_backward_feature_kernel<float, float, long>", "other"),
])
def test_a_kernel_falls_in_the_category_its_name_says(bench, name, category):
    assert bench.kernel_category(name) == category


def test_the_category_table_has_a_row_per_category_and_a_column_per_contender(bench):
    times = {name: dict(matmul=1.0 + i, copy=0.25, total=1.25 + i) for i, name in enumerate(("seqssm", "mamba_ssm"))}
    lines = bench.category_table(times).splitlines()
    assert lines[0] == "| kernels | seqssm ms | mamba_ssm ms |" and lines[1] == "|---|---|---|"
    assert lines[2:] == ["| matmul | 1.00 | 2.00 |", "| copy | 0.25 | 0.25 |", "| total | 1.25 | 2.25 |"]


def test_device_idle_finds_the_gaps_between_device_work_and_the_op_that_ended_each(bench):
    """The device's busy time is the union of its events (overlaps once), the gaps between them are named by the
    host op whose launch ended them, and host calls that wait for the device are counted."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import Interval

    def event(name, start, end, device=DeviceType.CUDA, id=0, linked=0):
        return SimpleNamespace(name=name, time_range=Interval(start, end), device_type=device, id=id,
                               linked_correlation_id=linked)

    events = [
        event("aten::mm", 0, 5, DeviceType.CPU, id=1), event("aten::add", 30, 32, DeviceType.CPU, id=2),
        event("cudaStreamSynchronize", 20, 29, DeviceType.CPU, id=7, linked=2),
        event("gemm", 10, 20, linked=1), event("gemm tail", 15, 25, linked=1),  # overlapping: counted once
        event("add_kernel", 225, 230, linked=2), event("copy", 230, 240, linked=2),  # back to back: no gap
    ]
    lines = bench.device_idle(events).splitlines()
    assert lines[0] == "device idle: span 0.23 ms, busy 0.03 ms, idle 0.20 ms in 1 gaps, 4 device events"
    assert lines[1] == "host calls that wait for the device: cudaStreamSynchronize x1 (0.01 ms)"
    assert lines[3].split() == ["200.0", "us", "at", "0.015", "ms", "aten::add", "->", "add_kernel"]
    assert bench.device_idle(events[:3]) == "device idle: no device events"


def test_the_profile_writes_each_part_and_the_category_table(bench, tmp_path, monkeypatch):
    """--profile runs on CUDA only; here its CUDA pieces are stood in for (no device check, a CPU profiler record)
    so that its parts run through on a tiny size: the category table's columns, every contender's part (mamba_ssm's
    error where it does not import), the decoding step and both S4D stacks, in profile.txt."""
    from torch.profiler import ProfilerActivity, profile

    def cpu_profiled(fn, warmups, activities):
        for _ in range(warmups):
            fn()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        return prof

    monkeypatch.setattr(bench, "needs_cuda", lambda device, what: None)
    monkeypatch.setattr(bench, "profiled", cpu_profiled)
    peer = tmp_path / "s4d.py"
    peer.write_text(STAND_IN_PEER)
    args = bench.parse_args(["--device", "cpu", "--size", "tiny", "--s4-peer", str(peer), "--out", str(tmp_path)])
    size = bench.SIZES["tiny"]
    bench.write_weights(size, tmp_path / "weights")
    text = bench.profile_train(args, size, tmp_path / "weights", torch.device("cpu"), tmp_path / "profile")
    assert (tmp_path / "profile" / "profile.txt").read_text() == text + "\n"
    head = text.splitlines()
    assert head[0].startswith(f"one training step, batch {size['batch']} x length {size['length']}, bf16 autocast")
    assert head[1].startswith(f"| kernels | {bench.SEQSSM} ms | {bench.SEQSSM_TRITON} ms |")
    for part in (f"{bench.SEQSSM}: one training step", f"{bench.SEQSSM_TRITON}: one training step",
                 f"{bench.MAMBA_SSM}: ", "one decoding step, batch 1", f"{bench.S4D_SEQSSM}: one training step",
                 f"{bench.S4D_PEER}: one training step"):
        assert part in text, part
