"""scripts/bench_ssd.py: the tiny CPU run (Triton interpreted) writes a timed row for each seqssm backend, with and
without resets, and a row for mamba_ssm (its time, or why it is missing)."""

from __future__ import annotations

import json
import pytest

pytest.importorskip("triton", reason="triton (the [triton] extra) is not installed")


def test_the_cpu_smoke_run_times_every_backend(tmp_path, monkeypatch, load_script):
    bench = load_script("bench_ssd")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # set here too, so that monkeypatch restores it afterwards
    out = tmp_path / "bench_ssd.json"
    assert bench.main(["--device", "cpu", "--repeats", "1", "--warmup-max", "2", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    timed = {(r["backend"], r["resets"]) for r in rows if r.get("median_ms", 0) > 0}
    assert timed >= {(b, resets) for b in ("triton", "chunked") for resets in (False, True)}
    [mamba] = [r for r in rows if r["backend"] == "mamba_ssm"]
    assert ("median_ms" in mamba) != ("error" in mamba)
    assert out.with_suffix(".md").read_text().count("\n|") == len(rows) + 2  # the header, its rule and the rows


def test_every_row_is_written_as_it_finishes(tmp_path, monkeypatch, load_script):
    """A run stopped by a time limit keeps what it finished: the outputs are rewritten after each row."""
    bench = load_script("bench_ssd")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    counts = []
    monkeypatch.setattr(bench, "write_outputs", lambda result, table, out: counts.append(len(result["rows"])))
    bench.main(["--device", "cpu", "--repeats", "1", "--warmup-max", "2", "--backends", "chunked", "mamba_ssm",
                "--out", str(tmp_path / "bench_ssd.json")])
    assert counts == list(range(1, len(counts) + 1)) and len(counts) == 3  # chunked twice, mamba_ssm once
