"""The Triton kernels compiled ahead of time for sm_80 and sm_90 with triton's own compiler and ptxas (no GPU
needed): the quick tier of `seqssm.ops.triton_aot` must meet every rule, and the judge itself must catch what
the interpreter hides (a compile error, spills, too many registers), and its compiles, split between processes,
must come back whole and in order."""

import multiprocessing
import os
import re
import signal

import pytest
import torch

triton = pytest.importorskip("triton", reason="triton (the [triton] extra) is not installed")
import triton.language as tl  # noqa: E402

from seqssm.ops import triton_aot  # noqa: E402


@pytest.fixture(scope="module")
def quick():
    results = triton_aot.compile_all(triton_aot.cases("quick"))
    return results, triton_aot.check(results)


def test_every_launch_of_the_quick_tier_compiles_and_meets_the_rules(quick):
    results, problems = quick
    assert not problems, "\n".join(problems)
    kernels = {(r.launch.kernel_name, r.arch) for r in results}
    assert kernels == {(k, arch) for k in ("selective_scan_fwd", "selective_scan_bwd", "linear_scan_fwd",
                                            "linear_scan_bwd", "ssd_fwd", "ssd_bwd_dh", "ssd_bwd_h",
                                            "selective_step_fwd", "conv1d_step_fwd", "conv1d_fwd", "conv1d_bwd")
                       for arch in (80, 90)}
    from seqssm.ops.triton_scan import backward_configs, forward_configs

    for r in results:  # every config its autotuner may pick was compiled
        if not r.launch.kernel_name.startswith("selective_scan"):
            continue
        tried = {(x.config["BLOCK_D"], x.config.get("STAGES"), x.config["num_warps"]) for x in results
                 if x.launch is r.launch and x.arch == r.arch}
        if r.launch.kernel_name == "selective_scan_fwd":
            assert tried == set(forward_configs(r.launch.kwargs["BLOCK_N"]))
        elif r.launch.kernel_name == "selective_scan_bwd":
            wide = r.launch.args[0].element_size() >= 4
            assert tried == {(d, None, w) for d, w in backward_configs(r.launch.kwargs["BLOCK_T"], wide)}
    assert all(r.registers and r.shared is not None for r in results)
    ssd = {(r.launch.case.dtype, r.launch.kernel_name) for r in results if r.launch.case.op == "ssd"}
    assert ssd == {(d, k) for d in (torch.bfloat16, torch.float32) for k in ("ssd_fwd", "ssd_bwd_dh", "ssd_bwd_h")}
    # The decoding step's two kernels at mamba-130m widths, bf16 and float32, batch 1 and 16 (one compile serves both
    # batches).
    step = {(r.launch.kernel_name, c.dtype, c.sizes["batch"], r.arch)
            for r in results if r.launch.case.op == "step" for c in r.launch.cases()}
    assert step == {(k, d, b, arch) for k in ("selective_step_fwd", "conv1d_step_fwd")
                    for d in (torch.bfloat16, torch.float32) for b in (1, 16) for arch in (80, 90)}
    # The Mamba block's causal conv, forward and backward, bf16 and float32, in the block's layout.
    conv = {(r.launch.kernel_name, r.launch.case.dtype, r.arch) for r in results if r.launch.case.op == "conv"}
    assert conv == {(k, d, arch) for k in ("conv1d_fwd", "conv1d_bwd") for d in (torch.bfloat16, torch.float32)
                    for arch in (80, 90)}


def test_the_stress_shapes_pass_64_bit_strides_and_compile(quick):
    """A batch row of 2^31 elements: the stride Triton receives is 64-bit, and that variant compiles."""
    results, _ = quick
    stress = [r for r in results if "stress" in r.launch.case.name]
    assert stress and all(r.error is None for r in stress)
    assert any("i64" in r.launch.variant()[1] for r in stress)


@triton.jit
def _two_tile_shapes(x_ptr, VARIABLE: tl.constexpr):
    # The bug the interpreter let through: returns of two tile shapes under a constexpr branch.
    x = _pick(x_ptr, VARIABLE)
    tl.store(x_ptr + tl.arange(0, 16)[:, None] + tl.arange(0, 16)[None, :], x)


@triton.jit
def _pick(x_ptr, VARIABLE: tl.constexpr):
    if VARIABLE:
        return tl.load(x_ptr + tl.arange(0, 16))[None, :]
    return tl.load(x_ptr + tl.arange(0, 16))[:, None]


@triton.jit
def _many_registers(x_ptr, n, BLOCK: tl.constexpr):
    # A (BLOCK, BLOCK) float32 tile per thread group far past 255 registers: ptxas spills it.
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK, BLOCK], tl.float32)
    for i in range(n):
        acc += tl.load(x_ptr + i + offs[:, None] * BLOCK + offs[None, :])
        acc = acc * tl.trans(acc)
    tl.store(x_ptr + offs[:, None] * BLOCK + offs[None, :], acc)


def _launch(kernel, args, kwargs, case):
    return triton_aot.Launch(kernel.__name__ if hasattr(kernel, "__name__") else "kernel", kernel, (1,), args,
                             kwargs, case)


def test_the_judge_reports_a_compile_error_that_the_interpreter_hides():
    case = triton_aot.Case("two tile shapes", "selective", torch.float32, dict(N=16))
    x = torch.empty(256, device="meta")
    [result] = triton_aot.compile_launch(_launch(_two_tile_shapes, (x,), dict(VARIABLE=True), case), 90)
    # triton 3.9 words it "... type mismatch ...", 3.6 "Inconsistent return types"
    assert result.error and re.search(r"mismatch|inconsistent return types", result.error, re.IGNORECASE)
    assert any("does not compile" in p for p in triton_aot.check([result]))


def test_the_judge_reports_spills_and_registers():
    case = triton_aot.Case("spilling", "selective", torch.float32, dict(N=16))
    x = torch.empty(256 * 256, device="meta")
    [result] = triton_aot.compile_launch(_launch(_many_registers, (x, 4), dict(BLOCK=128, num_warps=1), case), 90)
    assert result.error is None
    assert result.spills() and result.registers > 0
    result.launch.kernel_name = "selective_scan_bwd"  # the N <= 16 rule applies to the selective kernels
    [problem] = triton_aot.check([result])
    assert "no spills" in problem
    wide = triton_aot.Case("spilling at N=64", "selective", torch.float32, dict(N=64))
    result.launch.also = [wide]  # one compile serving N = 16 and N = 64: both rules apply
    problems = triton_aot.check([result])
    assert len(problems) == 2 and "no spills" in problems[0] and "every config spills" in problems[1]
    result.launch.case, result.launch.also = wide, []
    [problem] = triton_aot.check([result])
    assert "every config spills" in problem


def test_a_kernel_compiled_again_in_one_process_reports_its_spill_bytes_again(tmp_path):
    """As a second compile_all in one process compiles: each in a fresh Triton cache, the kernel already compiled in
    this process's memory. ptxas must run again, since its report is where the spill bytes come from."""
    case = triton_aot.Case("spilling", "selective", torch.float32, dict(N=16))
    x = torch.empty(256 * 256, device="meta")
    results = []
    for run in ("first", "second"):
        with triton.knobs.cache.scope():
            triton.knobs.cache.dir = str(tmp_path / run)
            launch = _launch(_many_registers, (x, 4), dict(BLOCK=64, num_warps=1), case)
            results += triton_aot.compile_launch(launch, 90)
    assert results[0].spill_stores and results[1].spill_stores == results[0].spill_stores


def _fake_compiles(launches, fail_at=None, die_at=None):
    """A compile_share that 'compiles' position p into one result of launches[p], arch p (and config {"p": p}); it
    raises at fail_at and kills its own process at die_at."""
    def compile_share(positions):
        results = []
        for p in positions:
            if p == fail_at:
                raise ValueError(f"no compile at {p}")
            if p == die_at:
                os.kill(os.getpid(), signal.SIGKILL)
            results.append((p, triton_aot.Result(launches[p], p, {"p": p}, 0.0, registers=p)))
        return results
    return compile_share


def test_compiles_split_between_processes_come_back_in_order_joined_to_the_parents_launches():
    launches = [object() for _ in range(7)]
    for jobs in (1, 3):
        rows = triton_aot._in_processes(_fake_compiles(launches), 7, jobs, launches.__getitem__)
        assert [p for p, _ in rows] == list(range(7))
        assert all(r.launch is launches[p] and r.arch == r.registers == r.config["p"] == p for p, r in rows)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                    reason="compiles run in forked processes only where the platform forks")
def test_a_compile_process_that_fails_or_dies_is_an_error_not_a_hang():
    launches = [object() for _ in range(7)]
    with pytest.raises(RuntimeError, match="ValueError: no compile at 4"):
        triton_aot._in_processes(_fake_compiles(launches, fail_at=4), 7, 3, launches.__getitem__)
    with pytest.raises(RuntimeError, match="died"):
        triton_aot._in_processes(_fake_compiles(launches, die_at=2), 7, 3, launches.__getitem__)


@pytest.fixture(scope="module")
def bench(load_script):
    """scripts/bench_scan.py as a module."""
    return load_script("bench_scan")


def test_the_cuda_benchmark_judges_each_target_in_its_direction(bench):
    """scripts/bench_scan.py's verdicts on made-up rows: a ratio under the bound is met, over it missed, and
    a backend that is absent or failed leaves its target unmeasured (never met)."""

    def row(shape, resets, backend, ms, op="selective_scan"):
        return {"op": op, "shape": shape, "resets": resets, "backend": backend, "median_ms": ms, "peak_mb": 1.0}

    def limited(r, limit_ms):
        return {**r, "limit_ms": limit_ms}

    rows = [limited(row("mamba130m-2048", False, "triton", 3.0), 1.5), row("mamba130m-2048", False, "mamba_ssm", 2.5),
            {**row("mamba130m-8192", False, "mamba_ssm", 0), "median_ms": None, "error": "not installed"},
            limited(row("mamba130m-8192", False, "triton", 4.0), 1.0),
            row("mamba130m-2048", True, "triton", 3.2), row("mamba130m-2048", True, "torch", 25.0),
            row("thesis-4096", True, "triton", 1.0), row("thesis-4096", True, "torch", 15.0),
            limited(row("s5-ppo", True, "triton", 2.0, "linear_scan"), 1.0), row("s5-ppo", True, "torch", 1.0, "linear_scan"),
            row("s5-ppo", False, "triton", 1.9, "linear_scan")]
    del rows[2]["median_ms"]
    verdicts = {v["target"]: v["status"] for v in bench.judge(rows)}
    assert list(verdicts.values()) == [
        "met",  # 3.0 / 2.5 within 1.5x of mamba_ssm
        "unmeasured",  # mamba_ssm failed at L 8192
        "met", "missed",  # 3.0 / 1.5 and 4.0 / 1.0 against the limit
        "met", "unmeasured",  # resets 3.2 / 3.0; no rows with resets at L 8192
        "missed", "missed",  # 3.2 / 25 and 1.0 / 15, over 1/20
        "missed", "met", "met",  # linear: 2.0 / 1.0 against torch, against its limit, 2.0 / 1.9 with resets
    ]


def test_the_cuda_benchmark_limit_is_the_slowest_of_exponentials_fmas_and_memory(bench):
    """scripts/bench_scan.py's hardware limit of a selective scan call at mamba-130m widths with an H100's peaks:
    3 exponentials per state and step at 16 per clock per multiprocessor bound it, about 0.29 ms."""
    clock = 1.98e9
    peaks = {"exp_per_s": 132 * 16 * clock, "fma_per_s": 132 * 128 * clock, "memory_bytes_per_s": 3.35e12}
    limit = bench.selective_limit_ms(dict(batch=8, dim=1536, N=16, L=2048), 2, peaks)
    states = 8 * 1536 * 16 * 2048
    assert limit["exp_ms"] == round(3 * states / peaks["exp_per_s"] * 1e3, 4)
    assert limit["limit_ms"] == limit["exp_ms"] == pytest.approx(0.289, abs=1e-3)
    assert limit["hbm_ms"] < limit["exp_ms"] and limit["fma_ms"] < limit["exp_ms"]
    slow_memory = bench.selective_limit_ms(dict(batch=8, dim=1536, N=16, L=2048), 2, {**peaks, "memory_bytes_per_s": 1e11})
    assert slow_memory["limit_ms"] == slow_memory["hbm_ms"] > limit["limit_ms"]


def test_the_benchmark_table_gives_each_rows_kernel_time_where_it_was_read(bench):
    """scripts/bench_scan.py's markdown: a row's kernel time and kernel count beside its median, blank where the
    row has none (CPU rows, failed backends), and the error where the profiler failed."""
    rows = [{"op": "linear_scan", "shape": "s5-ppo", "resets": False, "backend": "triton", "median_ms": 0.21,
             "kernel_ms": 0.034, "kernels": 5, "peak_mb": 30.0, "limit_ms": 0.012, "limit_fraction": 0.057},
            {"op": "linear_scan", "shape": "s5-ppo", "resets": False, "backend": "torch", "error": "out of memory"},
            {"op": "linear_scan", "shape": "s5-ppo", "resets": True, "backend": "triton", "median_ms": 0.25,
             "kernel_ms": "error: RuntimeError: CUPTI"}]
    table = bench.markdown({"device": "GPU", "torch": "2", "triton": "3", "dtype": "bfloat16", "repeats": 5,
                            "rows": rows, "targets": []})
    lines = [line for line in table.splitlines() if line.startswith("| linear_scan")]
    assert "| 0.21 | 0.034 (5) | 30.0 | 0.012 | 0.057 |" in lines[0]
    assert "| error: out of memory |  |" in lines[1]
    assert "| 0.25 | error: RuntimeError: CUPTI |" in lines[2]


def test_the_benchmark_times_the_forward_alone_without_building_a_graph(bench):
    """measure(backward=False) runs the call under no_grad (no gradient reaches the inputs) and still times it."""
    x = torch.randn(64, requires_grad=True)
    seen = []

    def fn():
        y = (x * 2).sum()
        seen.append(y.requires_grad)
        return y

    row = bench.measure(fn, [x], repeats=3, device=torch.device("cpu"), backward=False)
    assert len(row["times_ms"]) == 3 and row["median_ms"] >= 0
    assert seen and not any(seen) and x.grad is None
    bench.measure(fn, [x], repeats=1, device=torch.device("cpu"))
    assert seen[-1] and x.grad is not None


def test_kernel_sass_finds_each_loop_and_counts_its_ops(load_script):
    """scripts/kernel_sass.py's reading of a disassembly: a backward branch closes a loop, innermost first, and the
    ops inside it are counted (predicated ones too); a forward branch is no loop."""
    module = load_script("kernel_sass")
    sass = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   FFMA R2, R3, R4, R5 ;
        /*0020*/                   SHFL.BFLY PT, R6, R2, 0x10, 0x1f ;
        /*0030*/               @P0 MUFU.EX2 R7, R6 ;
        /*0040*/              @!P1 BRA 0x0010 ;
        /*0050*/                   LDG.E R8, desc[UR4][R10.64] ;
        /*0060*/               @P2 BRA 0x0080 ;
        /*0070*/                   STG.E desc[UR4][R10.64], R8 ;
        /*0080*/                   BRA 0x0000 ;
    """
    inner, outer = module.loops(sass)
    assert inner == {"range": "0x10-0x40", "instructions": 4, "shfl": 1, "mufu": 1, "ldg": 0, "stg": 0, "bar": 0}
    assert outer["range"] == "0x0-0x80" and outer["instructions"] == 9 and outer["ldg"] == outer["stg"] == 1
    # a step has exponentials; a loop without them (the forward's fold of its segments' summaries) is passed over
    fold = {**inner, "range": "0x100-0x140", "mufu": 0}
    assert module.step_loop([fold, outer]) is outer and module.step_loop([inner, outer]) is inner


@pytest.mark.parametrize("case", ["bench S5 PPO broadcast+state", "linear torch.float32 plain"])
def test_a_linear_tile_of_a_warps_row_scans_each_feature_in_one_thread(load_script, case):
    """The linear scan's widest tiles (64 complex64 or 128 float32 features a warp) hold each feature's steps in one
    thread under the triton installed: no shuffle in either kernel's loop (sm_90 SASS). Under triton 3.9 a complex
    tile read as two reals a feature had the lanes on the steps: 384 shuffles in the forward's loop."""
    kernel_sass = load_script("kernel_sass")
    [case] = [c for c in triton_aot.cases("full") + triton_aot.bench_cases() if c.name == case]
    checked = set()
    with triton_aot.targeting(90):
        for launch in triton_aot.capture(case):
            if launch.kernel_name.startswith("linear_scan"):
                [widest] = [c for c in launch.configs() if c["BLOCK_F"] == max(x["BLOCK_F"] for x in launch.configs())
                            and c["BLOCK_T"] == launch.configs()[0]["BLOCK_T"]]
                cubin = triton_aot.compile_kernel(launch, widest).asm["cubin"]
                [inner, *_] = kernel_sass.loops(triton_aot.cuobjdump(cubin, "--dump-sass"))
                assert inner["shfl"] == 0, f"{launch.kernel_name} {widest}: {inner}"
                checked.add(launch.kernel_name)
    assert checked == {"linear_scan_fwd", "linear_scan_bwd"}


def test_kernel_sass_counts_the_tile_elements_a_thread_holds(load_script):
    """The divisor of kernel_sass's per-element counts: the selective forward's (channels x n) tile, the backward's
    (channels x steps), the linear scan's (features x steps); a launch without an autotuner (as the linear scan's was
    before its configs, in an A/B against an older tree) leaves num_warps to Triton's default of 4."""
    module = load_script("kernel_sass")
    assert module._tile_elements({"BLOCK_D": 32, "num_warps": 1}, {"BLOCK_N": 16}) == 16
    assert module._tile_elements({"BLOCK_D": 2, "num_warps": 1}, {"BLOCK_T": 64}) == 4
    assert module._tile_elements({"BLOCK_F": 32, "BLOCK_T": 8, "num_warps": 1}, {}) == 8
    assert module._tile_elements({}, {"BLOCK_F": 32, "BLOCK_T": 32}) == 8
