"""scripts/bench_host.py: the host time of the Triton scan ops, their kernels swallowed, for every case and mode."""

import json

import seqssm.ops.triton_loader as loader


def test_a_short_run_times_every_case_in_both_modes_with_every_launch_swallowed(load_script, tmp_path, monkeypatch):
    bench = load_script("bench_host")
    swallowed, recording = [], loader.recording
    monkeypatch.setattr(loader, "recording", lambda record: recording(lambda kernel, *_, **__: swallowed.append(
        kernel.fn.__name__ if hasattr(kernel, "fn") else kernel.__name__)))
    result = bench.main(["--calls", "2", "--rounds", "1", "--out", str(tmp_path / "host.json")])
    assert json.loads((tmp_path / "host.json").read_text()) == result
    assert {(r["op"], r["mode"]) for r in result["rows"]} == {
        (op, mode) for op in bench.cases() for mode in ("forward", "forward (autograd)", "forward + backward")}
    assert all(r["us_per_call"] > 0 for r in result["rows"])
    # the launches went to the recorder (and so ran no kernel): forward and backward of both scans and the stack's conv
    assert {"linear_scan_fwd", "linear_scan_bwd", "selective_scan_fwd", "selective_scan_bwd", "conv1d_fwd",
            "conv1d_bwd"} <= set(swallowed)
