"""scripts/bench_compile.py: graph breaks per family, and an exit status that says whether a family failed or broke
its graph (gpu_check.sh runs it on CUDA, where the ops take other backends)."""

import json


def test_breaks_only_counts_each_familys_graph_breaks_and_fails_on_an_error(load_script, tmp_path):
    bench = load_script("bench_compile")
    result = bench.main(["--breaks-only", "--families", "mamba-s6", "core-s5", "--out", str(tmp_path)])
    assert [(r["family"], r["graph_breaks"]) for r in result["rows"]] == [("mamba-s6", 0), ("core-s5", 0)]
    assert json.loads((tmp_path / "bench_compile.json").read_text()) == result
    assert not bench.failed(result)
    result = bench.main(["--breaks-only", "--families", "mamba-s7", "--out", str(tmp_path)])
    assert "error" in result["rows"][0] and bench.failed(result)
    assert bench.failed({"rows": [{"family": "x", "graph_breaks": 2}]})

