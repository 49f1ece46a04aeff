"""Ahead-of-time compile check of the Triton kernels, on a machine without a GPU.

    python -m seqssm.ops.triton_aot [--tier quick|full|bench] [--arch 80 90] [--markdown docs/gpu.md]
        [--cache DIR --chunks 512] [--jobs N]

Triton's interpreter runs a kernel body as Python and hides compile errors, register pressure and
spills. Here the implementations of the Triton backends' custom ops run on `meta` tensors, as the
layers call them (forward, and backward where gradients are asked for), with each kernel launch
intercepted instead of run. Every captured launch is expanded over its autotuner's configs and compiled with
`JITFunction.warmup` under a stand-in driver that names the target (sm_80, sm_90), down to cubin
with the ptxas inside the triton wheel, in one forked process per CPU. Registers, stack and shared memory are
read off the cubin (`cuobjdump --dump-resource-usage`), spill bytes off ptxas's report.

`check` applies the rules the kernels must meet (shared memory within an H100's 227 KB per
block; the selective scan's float32 / float16 / bfloat16 kernels at N <= 16 at most 168 registers
and no spills in every config; at N = 64 at least one config without spills; the linear scan's kernels below
float64 (complex64 included) no spills in every config; the SSD scan's kernels, the decoding step's two
(`seqssm.ops.triton_step`) and the causal conv's (`seqssm.ops.triton_conv`) no spills).

Tested with triton 3.6 to 3.9 (`JITFunction.warmup`, `Autotuner.configs`, `triton.knobs`,
`triton.runtime.driver.set_active`); other releases may move these.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Callable

import torch

SHARED_LIMIT = 227 * 1024  # bytes of shared memory one block may use on an H100 (sm_90)
REGISTER_LIMIT = 168  # per thread, selective kernels at N <= 16; they ask ptxas for no more (SELECTIVE_MAX_REGISTERS)
ARCHS = (80, 90)


@dataclasses.dataclass(frozen=True)
class Case:
    """One call the layers make: `op` "selective", "linear", "ssd", "conv" (the Mamba block's causal conv) or "step"
    (one decoding step of the Mamba block), the dtype of the inputs, sizes and flags."""

    name: str
    op: str
    dtype: torch.dtype
    sizes: dict
    flags: frozenset = frozenset()
    grad: bool = True

    def run(self) -> None:
        """Call the op's Triton implementation on meta tensors (forward, then backward if `grad`)."""
        {"selective": _selective_call, "linear": _linear_call, "ssd": _ssd_call, "conv": _conv_call,
         "step": _step_call}[self.op](self)


def _leaf(*shape, dtype, grad):
    return torch.empty(*shape, device="meta", dtype=dtype).requires_grad_(grad)


def _selective_call(case: Case) -> None:
    """The forward and, with `grad`, the backward implementation of the Triton selective scan, as its custom
    ops run them (their fake versions run on meta tensors instead, launching nothing)."""
    from seqssm.ops import triton_scan

    s, f, dt = case.sizes, case.flags, case.dtype
    b, d, n, length, groups = s["batch"], s["dim"], s["N"], s["L"], s.get("groups", 0)
    param = torch.float64 if dt == torch.float64 else torch.float32

    def seq(*shape):  # (..., L) in memory order (..., L, channels) when channels_last, as S6 passes it
        if "channels_last" in f:
            return _leaf(*shape[:-2], shape[-1], shape[-2], dtype=dt, grad=False).transpose(-1, -2)
        return _leaf(*shape, dtype=dt, grad=False)

    def channels(*shape):  # u, Δ, z (b, d, L): (d, b, L) memory in the Mamba block's layout on CUDA
        if "block_layout" in f:
            return _leaf(shape[1], shape[0], shape[2], dtype=dt, grad=False).transpose(0, 1)
        return seq(*shape)

    bc = (b, n, length) if groups == 0 else (b, groups, n, length)
    B = _leaf(d, n, dtype=param, grad=False) if "B_invariant" in f else seq(*bc)
    C = _leaf(d, n, dtype=param, grad=False) if "C_invariant" in f else seq(*bc)
    masked = "mask" in f  # S6 with a mask: Δ arrives after softplus, with no bias
    z = None if "no_z" in f else channels(b, d, length)  # without z, the gate is outside the scan
    u, delta, z, B, C = triton_scan.kernel_layout(channels(b, d, length), channels(b, d, length), z, B, C)
    A, D = _leaf(d, n, dtype=param, grad=False), _leaf(d, dtype=param, grad=False)
    bias = None if masked else _leaf(d, dtype=param, grad=False)
    h0 = _leaf(b, d, n, dtype=param, grad=False) if "state" in f else None
    resets = torch.empty(b, length, device="meta", dtype=torch.bool) if "resets" in f else None
    y, last, starts = triton_scan.selective_forward(u, delta, A, B, C, D, z, bias, h0, resets, not masked,
                                                    "state" in f, case.grad)
    if case.grad:
        # out_proj's backward hands the block's scan a channels-last gradient
        grad_y = _leaf(b, length, d, dtype=dt, grad=False).transpose(1, 2) if "block_layout" in f else torch.empty_like(y)
        triton_scan.selective_backward(grad_y, torch.empty_like(last) if "state" in f else None, u,
                                       delta, A, B, C, D, z, bias, resets, starts, not masked, h0 is not None)


def _linear_call(case: Case) -> None:
    """The forward and, with `grad`, the backward implementation of the Triton linear scan."""
    from seqssm.ops import triton_scan

    s, f = case.sizes, case.flags
    b, length, feat = s["batch"], s["L"], s["F"]
    # A broadcast a goes in as S5's does, one value per feature (1, 1, F); its gradient is summed in the kernel.
    a = _leaf(1 if "broadcast" in f else b, 1 if "broadcast" in f else length, feat, dtype=case.dtype, grad=False)
    x = _leaf(b, length, feat, dtype=case.dtype, grad=False)
    h0 = _leaf(b, feat, dtype=case.dtype, grad=False) if "state" in f else None
    resets = torch.empty(b, length, device="meta", dtype=torch.bool) if "resets" in f else None
    h = triton_scan.linear_forward(a, x, h0, resets)
    if case.grad:
        triton_scan.linear_backward(torch.empty_like(h), a, h0, resets, h)


def _ssd_call(case: Case) -> None:
    """The forward and, with `grad`, the backward implementation of the Triton SSD scan, as the Mamba-2 layer calls
    it: x a (b, L, H, P) view of its projection, Δ in float32, B and C views in x's dtype, A and D float32."""
    from seqssm.ops import triton_ssd

    s, f, dt = case.sizes, case.flags, case.dtype
    b, length, heads, p, n, groups = s["batch"], s["L"], s["heads"], s["P"], s["N"], s["groups"]
    width = heads * p + 2 * groups * n
    xBC = _leaf(b, length, width, dtype=dt, grad=False)  # one projection, split
    x = xBC[..., :heads * p].unflatten(-1, (heads, p))
    B = xBC[..., heads * p:heads * p + groups * n].unflatten(-1, (groups, n))
    C = xBC[..., heads * p + groups * n:].unflatten(-1, (groups, n))
    delta = _leaf(b, length, heads, dtype=torch.float32, grad=False)
    A, D = _leaf(heads, dtype=torch.float32, grad=False), _leaf(heads, dtype=torch.float32, grad=False)
    h0 = _leaf(b, heads, p, n, dtype=torch.float32, grad=False) if "state" in f else None
    resets = torch.empty(b, length, device="meta", dtype=torch.bool) if "resets" in f else None
    tile = triton_ssd.ssd_tile(s["chunk"], length, False)
    seg = triton_ssd.ssd_segment(s["chunk"], tile)
    y, last, states = triton_ssd.ssd_forward(x, delta, A, B, C, D, h0, resets, tile, seg, case.grad)
    if case.grad:
        triton_ssd.ssd_backward(torch.empty_like(y), torch.empty_like(last) if "state" in f else None, x, delta, A,
                                B, C, D, resets, states, tile, seg, h0 is not None)


def _conv_call(case: Case) -> None:
    """The Triton causal conv forward and backward (`seqssm.ops.triton_conv`), as the Mamba block calls it: x the first
    half of in_proj's (2 d, b L) output (time-contiguous), or with "channels_last" a transposed (b, L, d) tensor (the
    Mamba-2 layer's), or with "contiguous" a (b, d, L) one (scripts/bench_scan.py's); the conv's (d, 4) taps and bias
    float32 (the block's parameters), SiLU on; the gradient laid out as x."""
    from seqssm.ops import triton_conv

    s, dt = case.sizes, case.dtype
    b, d, length = s["batch"], s["dim"], s["L"]
    if "channels_last" in case.flags:
        x = _leaf(b, length, d, dtype=dt, grad=False).transpose(1, 2)
    elif "contiguous" in case.flags:
        x = _leaf(b, d, length, dtype=dt, grad=False)
    else:
        x = _leaf(2 * d, b, length, dtype=dt, grad=False)[:d].transpose(0, 1)
    weight, bias = _leaf(d, 1, 4, dtype=torch.float32, grad=False)[:, 0], _leaf(d, dtype=torch.float32, grad=False)
    y = triton_conv.conv_forward(x, weight, bias, True)
    if case.grad:
        triton_conv.conv_backward(x, weight, bias, torch.empty_like(y), True)


def _step_call(case: Case) -> None:
    """The Triton kernels of one decoding step of the Mamba block, as it calls them. The conv step: x_t the first
    half of in_proj's (b, 2 d) output, its (b, d, 3) state, the conv's (d, 4) taps and bias, in the layer's dtype.
    The S6 step (S6.step_projected): u_t, Δ_t (dt_proj's output) and the gate z_t in the layer's dtype, B_t and C_t
    slices of x_proj's (b, dt_rank + 2N) output; the state, A, D and Δ's bias float32. Forward only: decoding asks
    no gradient (the ops' backwards are the torch paths)."""
    from seqssm.ops import triton_step

    s, dt = case.sizes, case.dtype
    b, d, n = s["batch"], s["dim"], s["N"]
    layer = dict(dtype=dt, grad=False)
    xz = _leaf(b, 2 * d, **layer)
    triton_step.conv_step_forward(xz[:, :d], _leaf(b, d, 3, **layer), _leaf(d, 1, 4, **layer)[:, 0], _leaf(d, **layer),
                                  True)
    rank = -(-d // 16)  # mamba's dt_rank, d_model / 16
    f32 = dict(dtype=torch.float32, grad=False)
    proj = _leaf(b, rank + 2 * n, dtype=dt, grad=False)
    triton_step.step_forward(_leaf(b, d, n, **f32), _leaf(b, d, dtype=dt, grad=False),
                             _leaf(b, d, dtype=dt, grad=False), _leaf(d, n, **f32), proj[:, rank:rank + n],
                             proj[:, rank + n:], _leaf(d, **f32), xz[:, d:], _leaf(d, **f32), True)


# The shapes the project runs: the Ulbaek 2024 thesis models (batch 32, d_inner 232, N 16, L 16384),
# mamba-130m's widths (d_inner 1536, N 16), a wide state (N 64), the S5 PPO update (Lu et al. 2023:
# batch 8, 128 complex modes, L 1024), and a stress shape where one batch row of S4D with resets
# passes 2^31 elements (H 1024 x N 64 states, L 32768).
THESIS = dict(batch=32, dim=232, N=16, L=16384)
MAMBA_130M = dict(batch=8, dim=1536, N=16, L=2048)
WIDE_STATE = dict(batch=8, dim=1536, N=64, L=2048)
S5_PPO = dict(batch=8, L=1024, F=128)
S4D_STRESS = dict(batch=2, L=32768, F=1024 * 64)
MAMBA_STRESS = dict(batch=1, dim=2048, N=16, L=2**21)
# mamba-130m decoding one token (d_inner 1536, N 16) for one sequence and for a batch of 16.
MAMBA_130M_DECODE = (dict(batch=1, dim=1536, N=16), dict(batch=16, dim=1536, N=16))
# Mamba-2 130m (Dao & Gu 2024): 24 heads of 64 channels, d_state 128, one group, chunks of 256.
MAMBA2_130M = dict(batch=8, L=2048, heads=24, P=64, N=128, groups=1, chunk=256)


def cases(tier: str = "quick") -> list[Case]:
    """The calls compiled by `tier`: "quick" (one per kernel variant the layers reach in training) or "full"
    (every dtype, layout and flag combination, the stress shapes included)."""
    quick = [
        Case("S6 training in the Mamba block, bf16", "selective", torch.bfloat16, MAMBA_130M,
             frozenset({"block_layout"})),
        Case("S6 scan with state and resets (RL update)", "selective", torch.float32, MAMBA_130M,
             frozenset({"state", "resets", "channels_last"})),
        Case("S6 N=64", "selective", torch.float32, WIDE_STATE),
        Case("S5 PPO update, complex", "linear", torch.complex64, S5_PPO, frozenset({"broadcast", "state", "resets"})),
        Case("S4D stress, 2^31 elements per row", "linear", torch.float32, S4D_STRESS, frozenset({"resets"})),
        Case("SSD training in the Mamba-2 layer, bf16", "ssd", torch.bfloat16, MAMBA2_130M),
        Case("SSD training in the Mamba-2 layer, float32", "ssd", torch.float32, MAMBA2_130M),
        *(Case(f"Mamba decoding step, batch {shape['batch']}, {str(dtype).removeprefix('torch.')}", "step", dtype, shape,
               grad=False) for shape in MAMBA_130M_DECODE for dtype in (torch.bfloat16, torch.float32)),
        Case("Mamba block conv, bf16", "conv", torch.bfloat16, MAMBA_130M),
        Case("Mamba block conv, float32", "conv", torch.float32, MAMBA_130M),
    ]
    if tier == "quick":
        return quick
    if tier == "bench":
        return bench_cases()
    full = list(quick)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        for shape in (THESIS, MAMBA_130M, WIDE_STATE):
            for flags in (frozenset(), frozenset({"state", "resets"}), frozenset({"B_invariant", "C_invariant"}),
                          frozenset({"channels_last", "mask"})):
                full.append(Case(f"S6 {dtype} N={shape['N']} {'+'.join(sorted(flags)) or 'plain'}", "selective",
                                 dtype, shape, flags))
    full += [
        Case("S6 groups, invariant B", "selective", torch.float32, {**MAMBA_130M, "groups": 4},
             frozenset({"B_invariant", "state"})),
        Case("S6 invariant C", "selective", torch.bfloat16, MAMBA_130M, frozenset({"C_invariant"})),
        Case("S6 inference", "selective", torch.bfloat16, MAMBA_130M, frozenset({"state"}), grad=False),
        Case("S6 stress, 2^31 elements per tensor", "selective", torch.bfloat16, MAMBA_STRESS, frozenset({"resets"})),
    ]
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.complex64, torch.complex128):
        for flags in (frozenset(), frozenset({"broadcast", "state", "resets"})):
            full.append(Case(f"linear {dtype} {'+'.join(sorted(flags)) or 'plain'}", "linear", dtype, S5_PPO, flags))
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        full.append(Case(f"SSD {dtype} state+resets", "ssd", dtype, MAMBA2_130M, frozenset({"state", "resets"})))
    full.append(Case("SSD fp16", "ssd", torch.float16, MAMBA2_130M))
    full += [Case(f"conv {dtype} {'+'.join(flags) or 'block layout'}", "conv", dtype, MAMBA_130M, flags)
             for dtype in (torch.float16, torch.bfloat16, torch.float32)
             for flags in (frozenset(), frozenset({"channels_last"}), frozenset({"contiguous"}))]
    full.append(Case("SSD inference, bf16", "ssd", torch.bfloat16, MAMBA2_130M, frozenset({"state"}), grad=False))
    return full


def bench_cases() -> list[Case]:
    """The Triton calls of the CUDA benchmarks (scripts/bench_scan.py, scripts/bench_models.py), compiled into a
    cache ahead of a short GPU session: bfloat16 S6 at the thesis's, mamba-130m's and an RL update's widths with
    and without resets, the Mamba block's scan and conv in its layout (bench_models.py), the conv as bench_scan.py calls it,
    and the S5 PPO update."""
    out = []
    shapes = [dict(batch=32, dim=232, N=16, L=L) for L in (1024, 4096, 16384)]
    shapes += [MAMBA_130M, dict(batch=2, dim=1536, N=16, L=8192), dict(batch=8, dim=128, N=16, L=1024)]
    for shape in shapes:
        for flags in (frozenset(), frozenset({"resets"})):
            out.append(Case(f"bench S6 {shape['batch']}x{shape['dim']}x{shape['L']} {'+'.join(flags) or 'plain'}",
                            "selective", torch.bfloat16, shape, flags))
    out.append(Case("bench S6 Mamba block", "selective", torch.bfloat16, MAMBA_130M, frozenset({"block_layout"})))
    out.append(Case("bench conv, Mamba block", "conv", torch.bfloat16, MAMBA_130M))
    out.append(Case("bench conv 8x1536x4096", "conv", torch.bfloat16, dict(batch=8, dim=1536, L=4096),
                    frozenset({"contiguous"})))
    for flags in (frozenset({"broadcast", "state"}), frozenset({"broadcast", "state", "resets"})):
        out.append(Case(f"bench S5 PPO {'+'.join(sorted(flags))}", "linear", torch.complex64, S5_PPO, flags))
    return out


@dataclasses.dataclass
class Launch:
    """One intercepted kernel launch: the kernel as the launcher holds it (a JITFunction, or an Autotuner
    around one), its grid and arguments, and the case that made it."""

    kernel_name: str
    kernel: object
    grid: object
    args: tuple
    kwargs: dict
    case: Case
    # Further cases that launch the very same compile (N, for one, is a loop bound, not a constexpr).
    also: list = dataclasses.field(default_factory=list)

    def cases(self) -> list[Case]:
        return [self.case, *self.also]

    def cases_name(self) -> str:
        return self.case.name + (f" (and {len(self.also)} more)" if self.also else "")

    def configs(self) -> list[dict]:
        """The launch's keyword sets, one per autotune config (one for a plain JITFunction)."""
        configs = getattr(self.kernel, "configs", None)
        if not configs:
            return [{}]
        return [c.all_kwargs() for c in configs]  # BLOCK_D, num_warps, maxnreg, ...

    def jit_function(self):
        return self.kernel.fn if hasattr(self.kernel, "configs") else self.kernel

    def variant(self) -> tuple:
        """What Triton specialises a compile on: constexprs, pointer dtypes, and 1 / divisible-by-16 ints."""
        def spec(x):
            if isinstance(x, torch.Tensor):
                return str(x.dtype)
            if isinstance(x, int):
                return ("one" if x == 1 else "i64" if abs(x) >= 2**31 else "div16" if x % 16 == 0 else "int")
            return repr(x)
        return (self.kernel_name, tuple(spec(a) for a in self.args), tuple(sorted(self.kwargs.items())))


def capture(case: Case) -> list[Launch]:
    """The kernel launches `case` makes, none of them run."""
    from seqssm.ops.triton_loader import recording

    launches: list[Launch] = []

    def record(kernel, grid, *args, **kwargs):
        jit = kernel.fn if hasattr(kernel, "configs") else kernel
        launches.append(Launch(jit.__name__, kernel, grid, args, kwargs, case))

    with recording(record):
        case.run()
    return launches


class _TargetDriver:
    """The least of a Triton driver that compiling (never launching) asks for: a target and a device id.
    The device id is the compute capability, so that each target keeps its own kernel cache."""

    def __init__(self, capability: int):
        from triton.backends.compiler import GPUTarget

        self.capability = capability
        self.target = GPUTarget("cuda", capability, 32)

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return self.capability

    def get_current_stream(self, device=None):
        return 0


def _triton_tool(name: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def cuobjdump(cubin: bytes, option: str) -> str:
    """What the cuobjdump in triton's wheel prints for a cubin with `option` (--dump-resource-usage, --dump-sass)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([_triton_tool("cuobjdump"), option, f.name], capture_output=True, text=True,
                              check=True).stdout


@contextlib.contextmanager
def targeting(arch: int):
    """Triton's active driver a stand-in for sm_`arch` inside the block (compiles, never launches), the previous
    one restored after."""
    from triton.runtime.driver import driver

    # Read without creating the default driver, which fails on a machine without a GPU.
    previous = getattr(driver, "_active", None)
    driver.set_active(_TargetDriver(arch))
    try:
        yield
    finally:
        driver._active = previous


def _resources(cubin: bytes) -> dict:
    """REG, STACK and SHARED of the cubin's kernel, as cuobjdump reports them."""
    found = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", cuobjdump(cubin, "--dump-resource-usage")))
    return {"registers": int(found["REG"]), "stack": int(found["STACK"]), "cubin_shared": int(found["SHARED"])}


@dataclasses.dataclass
class Result:
    """One compile: a launch under one config for one target."""

    launch: Launch
    arch: int
    config: dict
    seconds: float
    error: str | None = None
    registers: int | None = None
    stack: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    shared: int | None = None

    def config_name(self) -> str:
        c, k = self.config, self.launch.kwargs
        if "BLOCK_F" in c:
            return f"BLOCK_F={c['BLOCK_F']} BLOCK_T={c['BLOCK_T']} STAGES={c['STAGES']} warps={c['num_warps']}"
        if "STAGES" in c:
            return f"BLOCK_D={c['BLOCK_D']} STAGES={c['STAGES']} warps={c['num_warps']}"
        if "BLOCK_D" in c:
            return f"BLOCK_D={c['BLOCK_D']} warps={c['num_warps']}"
        if "BLOCK_Q" in k:
            return f"BLOCK_Q={k['BLOCK_Q']} BLOCK_P={k['BLOCK_P']} warps={k['num_warps']}"
        if "BLOCK_L" in k:
            return f"BLOCK_D={k['BLOCK_D']} BLOCK_L={k['BLOCK_L']} warps={k['num_warps']}"
        if "BLOCK_N" in k or "BLOCK_K" in k:
            inner = "BLOCK_N" if "BLOCK_N" in k else "BLOCK_K"
            return f"BLOCK_D={k['BLOCK_D']} {inner}={k[inner]} warps={k['num_warps']}"
        return f"BLOCK_F={k.get('BLOCK_F')} warps={c.get('num_warps', 4)}"

    def spills(self) -> bool:
        return bool(self.stack) or bool(self.spill_stores)


def compile_kernel(launch: Launch, config: dict, log: io.StringIO | None = None):
    """`launch` compiled under one autotune config for the target `targeting` set (its `.asm["cubin"]`, its
    `.metadata`); ptxas's report, with spill bytes, goes to `log` when given."""
    import triton

    function = launch.jit_function()
    with triton.knobs.nvidia.scope(), contextlib.redirect_stdout(log or io.StringIO()):
        if log is not None and hasattr(triton.knobs.nvidia, "dump_ptxas_log"):
            triton.knobs.nvidia.dump_ptxas_log = True
            # A kernel compiled before in this process comes from the function's in-memory cache, without ptxas
            # and so without its report: a second compile check in one process read no spill bytes.
            function.device_caches.clear()
        return function.warmup(*launch.args, grid=launch.grid, **{**launch.kwargs, **config})


def compile_launch(launch: Launch, arch: int) -> list[Result]:
    """Compile `launch` under each of its configs for sm_`arch` -> one Result per config."""
    results = []
    with targeting(arch):
        for config in launch.configs():
            start = time.perf_counter()
            log = io.StringIO()
            try:
                kernel = compile_kernel(launch, config, log)
            except Exception as err:  # a compile error is a result here, reported by `check`
                results.append(Result(launch, arch, config, time.perf_counter() - start, error=_describe(err)))
                continue
            row = Result(launch, arch, config, time.perf_counter() - start, shared=kernel.metadata.shared,
                         **{k: v for k, v in _resources(kernel.asm["cubin"]).items() if k != "cubin_shared"})
            spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log.getvalue())
            if spills:
                row.spill_stores, row.spill_loads = int(spills.group(1)), int(spills.group(2))
            results.append(row)
    return results


def _describe(err: BaseException) -> str:
    """One line: the error's type and where it was raised, and its innermost cause (Triton wraps the reason
    of a CompilationError, a type mismatch say, as the cause)."""
    cause = err
    while cause.__cause__ is not None or (cause.__context__ is not None and not cause.__suppress_context__):
        cause = cause.__cause__ or cause.__context__
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    text = f"{type(err).__name__}: {first}"
    if cause is not err:
        reason = next((line.strip() for line in reversed(str(cause).splitlines()) if line.strip()), "")
        text += f" | {type(cause).__name__}: {reason}"
    return text[:400]


def compile_all(case_list: list[Case], archs=ARCHS, progress: Callable[[str], None] | None = None,
                cache_dir: str | None = None, chunks=(None,), jobs: int | None = None) -> list[Result]:
    """Capture every case (once per selective chunk length in `chunks`, None: the default), compile each
    distinct kernel variant once per config and target, in `jobs` processes (default: one per CPU). Compiles run
    in a fresh Triton cache, so that ptxas runs (and reports spills) for every one; `cache_dir` keeps that cache,
    for a GPU machine to start warm."""
    import triton

    from seqssm.ops import triton_scan

    variants: dict[tuple, Launch] = {}
    default = triton_scan.SELECTIVE_MAX_CHUNK
    for chunk in chunks:
        triton_scan.SELECTIVE_MAX_CHUNK = chunk or default
        try:
            for case in case_list:
                for launch in capture(case):
                    first = variants.setdefault(launch.variant(), launch)
                    if first is not launch and case not in (first.case, *first.also):
                        first.also.append(case)
        finally:
            triton_scan.SELECTIVE_MAX_CHUNK = default
    launches = list(variants.values())
    work = [(i, arch) for i in range(len(launches)) for arch in archs]

    def compile_share(positions) -> list[tuple[int, Result]]:
        """(position in `work`, result) of each config of each compile at `positions`."""
        results = []
        for position in positions:
            i, arch = work[position]
            if progress:
                progress(f"[{i + 1}/{len(launches)}] sm_{arch} {launches[i].kernel_name} ({launches[i].case.name})")
            results.extend((position, r) for r in compile_launch(launches[i], arch))
        return results

    with contextlib.ExitStack() as stack:
        cache = cache_dir or stack.enter_context(tempfile.TemporaryDirectory())
        stack.enter_context(triton.knobs.cache.scope())
        triton.knobs.cache.dir = cache
        return [r for _, r in _in_processes(compile_share, len(work), jobs or os.cpu_count() or 1,
                                            lambda position: launches[work[position][0]])]


def _in_processes(compile_share, count: int, jobs: int, launch_at) -> list[tuple[int, Result]]:
    """compile_share over positions 0 .. count - 1 split round-robin between `jobs` forked processes (one process
    where the platform cannot fork), in the order of the positions. A child sends its results back as plain
    fields; the parent joins them to its own launch of that position (`launch_at`), which holds what a child could
    not send (kernels, meta tensors, cases)."""
    jobs = min(jobs, count)
    if jobs <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return compile_share(range(count))
    context = multiprocessing.get_context("fork")
    pipes = [context.Pipe(duplex=False) for _ in range(jobs)]

    def child(k: int) -> None:
        try:
            rows = [(position, {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name != "launch"})
                    for position, r in compile_share(range(k, count, jobs))]
            pipes[k][1].send((k, rows, None))
        except BaseException as err:  # the parent raises it: a child must not unwind into the caller's code
            pipes[k][1].send((k, [], f"{type(err).__name__}: {err}"))
        finally:
            os._exit(0)  # no atexit handlers or finalisers of the parent's (pytest's, say) in the child

    processes = [context.Process(target=child, args=(k,)) for k in range(jobs)]
    for process in processes:
        process.start()
    replies = []
    for (reader, _), process in zip(pipes, processes):
        while not reader.poll(1.0):
            if not process.is_alive() and not reader.poll():
                raise RuntimeError(f"a compile process died (exit code {process.exitcode}) before sending its results")
        replies.append(reader.recv())
    for process in processes:
        process.join()
    failed = [f"compile process {k}: {error}" for k, _, error in replies if error]
    if failed:
        raise RuntimeError("; ".join(failed))
    rows = sorted((row for _, share, _ in replies for row in share), key=lambda row: row[0])
    return [(position, Result(launch_at(position), **fields)) for position, fields in rows]


# Kernels that may not spill in any compile: the SSD scan's, the decoding step's two and the causal conv's.
_NO_SPILLS = ("ssd_", "selective_step", "conv1d_")


def _is_selective(r: Result) -> bool:
    return r.launch.kernel_name.startswith("selective_scan")


def check(results: list[Result]) -> list[str]:
    """What breaks the rules (module docstring), one line each; empty when all hold."""
    problems = []
    for r in results:
        where = f"sm_{r.arch} {r.launch.kernel_name} {r.config_name()} ({r.launch.cases_name()})"
        if r.error:
            problems.append(f"{where}: does not compile: {r.error}")
        elif r.shared > SHARED_LIMIT:
            problems.append(f"{where}: {r.shared} bytes of shared memory, over {SHARED_LIMIT}")
    strict = [r for r in results if _is_selective(r) and not r.error and r.launch.case.dtype != torch.float64]
    for r in strict:
        if min(c.sizes["N"] for c in r.launch.cases()) <= 16 and (r.registers > REGISTER_LIMIT or r.spills()):
            problems.append(f"sm_{r.arch} {r.launch.kernel_name} {r.config_name()} ({r.launch.cases_name()}): "
                            f"{r.registers} registers, {r.stack} bytes stack, {r.spill_stores} bytes spill stores "
                            f"(at N <= 16: at most {REGISTER_LIMIT} registers, no spills)")
    for r in results:
        if r.launch.kernel_name.startswith(_NO_SPILLS) and not r.error and r.spills():
            problems.append(f"sm_{r.arch} {r.launch.kernel_name} {r.config_name()} ({r.launch.cases_name()}): "
                            f"{r.registers} registers, {r.stack} bytes stack, {r.spill_stores} bytes spill stores "
                            f"(the SSD kernels, the decoding step and the causal conv: no spills)")
    for r in results:
        if (r.launch.kernel_name.startswith("linear_scan") and not r.error and r.spills()
                and r.launch.case.dtype not in (torch.float64, torch.complex128)):
            problems.append(f"sm_{r.arch} {r.launch.kernel_name} {r.config_name()} ({r.launch.cases_name()}): "
                            f"{r.registers} registers, {r.stack} bytes stack, {r.spill_stores} bytes spill stores "
                            f"(the linear scan below float64: no spills)")
    wide: dict[tuple, list[Result]] = {}
    for r in strict:
        if max(c.sizes["N"] for c in r.launch.cases()) > 16:
            wide.setdefault((r.arch, r.launch.variant()), []).append(r)
    for (arch, _), group in wide.items():
        if all(r.spills() for r in group):
            r = group[0]
            problems.append(f"sm_{arch} {r.launch.kernel_name} ({r.launch.cases_name()}): every config spills")
    return problems


def table(results: list[Result]) -> str:
    """A markdown table of every compile."""
    lines = ["| target | kernel | case | config | registers | spill stores / loads (bytes) | stack (bytes) "
             "| shared (bytes) | compile s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.error:
            lines.append(f"| sm_{r.arch} | {r.launch.kernel_name} | {r.launch.cases_name()} | {r.config_name()} | "
                         f"error: {r.error} | | | | {r.seconds:.1f} |")
            continue
        spills = "n/a" if r.spill_stores is None else f"{r.spill_stores} / {r.spill_loads}"
        lines.append(f"| sm_{r.arch} | {r.launch.kernel_name} | {r.launch.cases_name()} | {r.config_name()} | "
                     f"{r.registers} | {spills} | {r.stack} | {r.shared} | {r.seconds:.1f} |")
    return "\n".join(lines)


def shared_compiles(results: list[Result]) -> str:
    """Markdown lines naming, for each compile that serves several cases, every case it serves."""
    seen, lines = set(), []
    for r in results:
        key = r.launch.variant()
        if r.launch.also and key not in seen:
            seen.add(key)
            lines.append(f"- {r.launch.kernel_name}, {r.launch.case.name}: also "
                         + "; ".join(c.name for c in r.launch.also))
    return "\n".join(lines)


def summary(results: list[Result], problems: list[str]) -> str:
    """One line: how many compiles, failures and spilling configs, and the rule violations."""
    failed = sum(1 for r in results if r.error)
    spilling = sum(1 for r in results if not r.error and r.spills())
    worst = max((r.registers for r in results if not r.error and _is_selective(r)), default=0)
    return (f"{len(results)} compiles ({len({r.launch.variant() for r in results})} kernel variants x configs x "
            f"targets): {failed} failed, {spilling} with spills, selective scan at most {worst} registers; "
            f"{len(problems)} rule violations")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tier", choices=("quick", "full", "bench"), default="quick",
                        help="bench: the calls of the CUDA benchmarks, to fill --cache ahead of a GPU session")
    parser.add_argument("--cache", help="keep the compiled kernels in this Triton cache folder (TRITON_CACHE_DIR on "
                        "the GPU machine then finds them: same triton release and target)")
    parser.add_argument("--chunks", type=int, nargs="*", default=[],
                        help="also compile the selective scan with these chunk lengths (scripts/bench_scan.py --chunks)")
    parser.add_argument("--arch", type=int, nargs="+", default=list(ARCHS), help="compute capabilities (80 90)")
    parser.add_argument("--jobs", type=int, default=None, help="compile processes (default: one per CPU)")
    parser.add_argument("--markdown", help="write the compile table into this markdown file, between the "
                        "'<!-- compile table -->' markers")
    args = parser.parse_args(argv)
    results = compile_all(cases(args.tier), args.arch, progress=lambda m: print(m, file=sys.stderr, flush=True),
                          cache_dir=args.cache, chunks=(None, *args.chunks), jobs=args.jobs)
    problems = check(results)
    text = table(results)
    line = summary(results, problems)
    if args.markdown:
        shared = shared_compiles(results)
        _write_table(args.markdown, f"{line}\n\n{text}" + (f"\n\nCompiles that serve several cases:\n\n{shared}"
                                                             if shared else ""))
    else:
        print(text)
    for p in problems:
        print(p)
    print(line)
    return 1 if problems else 0


def _write_table(path: str, text: str) -> None:
    start, end = "<!-- compile table -->", "<!-- end of compile table -->"
    with open(path) as f:
        doc = f.read()
    if start not in doc or end not in doc:
        raise SystemExit(f"{path} has no '{start}' ... '{end}' markers to write the table between")
    head, rest = doc.split(start, 1)
    tail = rest.split(end, 1)[1]
    with open(path, "w") as f:
        f.write(f"{head}{start}\n{text}\n{end}{tail}")


if __name__ == "__main__":
    sys.exit(main())
