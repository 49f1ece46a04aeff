"""Generation speed of an imported Mamba: seqssm against transformers' own CPU path, same weights and tokens.

    python scripts/bench_generate.py                       # mamba-130m widths and a small model, batch 1 and 8
    python scripts/bench_generate.py --sizes small --repeats 3

For each size a random `MambaForCausalLM` is saved and loaded back with `SequenceModel.from_pretrained`.
Prompt processing: greedy generation of 1 token after a --prompt-length prompt (the prefill that
`generate` does: one scan over the prompt, state kept), tokens/s = batch * prompt length / time.
Decoding: generation of --new-tokens more tokens after a short prompt, timed as the difference to
generating one, tokens/s = batch * new tokens / time. Both libraries decode greedily and the script
checks that they produce the same tokens. Best of --repeats runs.

A third row, "weight-read bound", times only the matrix products that one decoding step must do
(every projection of every block and the vocabulary head, on the batch's vectors, in float32): no
float32 implementation that multiplies by these weights can decode faster on this machine, since at
small batch each step streams all of them from memory.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import torch

SIZES = {
    "130m": dict(hidden_size=768, num_hidden_layers=24, vocab_size=50280, state_size=16),
    "small": dict(hidden_size=256, num_hidden_layers=4, vocab_size=4096, state_size=16),
}


def best_time(fn, repeats: int) -> float:
    """Fastest of `repeats` calls of fn(), in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _matrix_products(hf, batch: int, transposed: bool) -> None:
    """The weight products of one decoding step of `hf` at `batch`: each Linear (and the tied head) once,
    as x W^T or, transposed, as W x^T (MKL is faster that way round for some skinny shapes)."""
    for module in hf.modules():
        if isinstance(module, torch.nn.Linear):
            x = torch.ones(batch, module.in_features)
            module.weight @ x.T if transposed else torch.nn.functional.linear(x, module.weight)


def weight_read_bound(hf, batch: int) -> float:
    """Decoding tokens/s if a step cost only its weight products, done the faster way round."""
    return batch / min(best_time(lambda: _matrix_products(hf, batch, t), 5) for t in (False, True))


def generators(hf, ours):
    """Greedy generate(prompt, n) -> token ids (B, L + n) for each library."""

    def hf_generate(prompt, n):
        return hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                           do_sample=False)

    def ours_generate(prompt, n):
        return ours.generate(prompt, n, temperature=0)

    return {"transformers": hf_generate, "seqssm": ours_generate}


@torch.no_grad()
def bench_size(name: str, args) -> list[tuple]:
    """Rows (size, batch, library, prompt tok/s, decode tok/s, same tokens) for one model size."""
    from transformers import MambaConfig, MambaForCausalLM

    from seqssm.models import SequenceModel

    torch.manual_seed(0)
    hf = MambaForCausalLM(MambaConfig(**SIZES[name])).eval()
    hf.generation_config.eos_token_id = None  # random weights: never stop early
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        ours = SequenceModel.from_pretrained(folder).eval()
    run = generators(hf, ours)
    rows = []
    vocab = SIZES[name]["vocab_size"]
    for batch in args.batches:
        prompt = torch.randint(0, vocab, (batch, args.prompt_length))
        short = prompt[:, :16]
        outs, result = {}, {}
        for lib, gen in run.items():
            gen(short, 2)  # warm-up
            prefill = best_time(lambda: gen(prompt, 1), args.repeats)
            one = best_time(lambda: gen(short, 1), args.repeats)
            many = best_time(lambda: outs.__setitem__(lib, gen(short, args.new_tokens + 1)), args.repeats)
            result[lib] = (batch * args.prompt_length / prefill, batch * args.new_tokens / max(many - one, 1e-9))
        same = torch.equal(outs["transformers"], outs["seqssm"])
        result["weight-read bound"] = (float("nan"), weight_read_bound(hf, batch))
        for lib in result:
            rows.append((name, batch, lib, *result[lib], same))
            print(f"  {name} batch {batch} {lib:12s} prompt {result[lib][0]:8.1f} tok/s  decode {result[lib][1]:7.1f} "
                  f"tok/s", flush=True)
    return rows


def main() -> None:
    """Run the comparison and print the table (markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["small", "130m"], choices=list(SIZES))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--prompt-length", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both libraries (default: torch's)")
    parser.add_argument("--out", default="runs/bench_generate.json")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    rows = [row for name in args.sizes for row in bench_size(name, args)]
    print(f"\n| size | batch | library | prompt ({args.prompt_length} tok) tok/s "
          f"| decode ({args.new_tokens} new) tok/s "
          "| speed-up prompt / decode | same tokens |")
    print("|---|---|---|---|---|---|---|")
    base = {(r[0], r[1]): r for r in rows if r[2] == "transformers"}
    records = []
    for size, batch, lib, prompt, decode, same in rows:
        ref = base[(size, batch)]
        speedup = "" if lib == "transformers" else f"{prompt / ref[3]:.1f}x / {decode / ref[4]:.1f}x"
        cells = (f"{prompt:.0f}", "yes" if same else "NO") if prompt == prompt else ("-", "-")  # nan: the bound row
        speedup = speedup.replace("nanx", "-")
        print(f"| {size} | {batch} | {lib} | {cells[0]} | {decode:.1f} | {speedup} | {cells[1]} |")
        records.append({"size": size, "batch": batch, "library": lib, "prompt_tok_s": prompt, "decode_tok_s": decode,
                        "prompt_speedup": prompt / ref[3], "decode_speedup": decode / ref[4], "same_tokens": same})
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"settings": vars(args), "torch_threads": torch.get_num_threads(), "rows": records}, f, indent=2)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
