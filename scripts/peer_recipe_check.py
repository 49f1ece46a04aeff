"""Train the peer's reference sMNIST model and a seqssm recipe on the same data for the same steps; print both.

The peer is the model that the S4 authors' `example.py` (state-spaces/s4) trains on sequential MNIST:
a linear encoder, `n_layers` post-norm residual blocks around their minimal S4D layer, mean pooling and a
linear decoder, trained with AdamW whose SSM parameters (A, Δ) train at lr 0.001 without weight decay,
and a cosine schedule to 0. Its S4D layer is written here from the S4D paper (Gu, Gupta, Goel, Ré 2022,
"On the Parameterization and Initialization of Diagonal State Space Models": section 3, the Vandermonde
kernel of the ZOH-discretised diagonal SSM with B = 1; section 4, the S4D-Lin initialisation A_n = -1/2 + iπn),
not copied; `tests/scripts/test_peer_recipe_check.py` checks its kernel and outputs against seqssm's own S4D
on shared parameters and against a reference that shares no code with either (the ZOH recurrence stepped in
complex128, a dense causal convolution, a closed-form one-mode kernel). Checked by hand against the published
module (state-spaces/s4 models/s4/s4d.py, shared parameters moved off their initial values, float64, H=6, N=16,
L=300): the same kernel and block outputs to the last bit; that code is not shipped here.
example.py steps its cosine once per epoch over 100 epochs; for runs shorter than an epoch the peer here
steps it once per optimizer step over the run, the same curve at this length.

    python scripts/peer_recipe_check.py --recipe smnist/cpu/simple-s4d --data_dir data/mnist \\
        --steps 600 --threads 1 --seed 0

Both models see the recipe's DataModule (the same files, split, permutation and batch size; each shuffles with
its own generator); each is then scored on the whole test split. Output: one line per model (test accuracy, training seconds), and with
--json a file holding both.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from seqssm.errors import RecipeError
from seqssm.recipes import find_recipe

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------------------
# The peer: S4D as the S4 authors' minimal standalone layer, inside example.py's backbone


class PeerS4D(nn.Module):
    """The S4 authors' minimal S4D layer: u (B, H, L) -> GLU(1x1 conv(dropout(GELU(K * u + D u)))), (B, H, L).

    Per channel h, N/2 complex modes A = -exp(log_A_real) + i A_imag (S4D-Lin at init: -1/2 + iπn), Δ =
    exp(log_dt) log-uniform in [dt_min, dt_max], B = 1 folded into C ~ complex N(0, 1), D ~ N(0, 1). The
    kernel is K_l = 2 Re Σ_n C_n (exp(ΔA_n) - 1) / A_n exp(ΔA_n l) (ZOH), applied by FFT convolution.
    The dropout zeroes whole channels (the same ones at every step), as the authors' tied dropout does.
    """

    def __init__(self, d_model: int, d_state: int = 64, dropout: float = 0.0, dt_min: float = 0.001,
                 dt_max: float = 0.1, ssm_lr: float | None = None):
        super().__init__()
        if d_state % 2:
            raise ValueError(f"d_state counts each conjugate pair twice and must be even, got {d_state}")
        H, half = d_model, d_state // 2
        log_dt = math.log(dt_min) + torch.rand(H) * (math.log(dt_max) - math.log(dt_min))
        self.C = nn.Parameter(torch.view_as_real(torch.randn(H, half, dtype=torch.cfloat)))
        self.log_dt = self._ssm(log_dt, ssm_lr)
        self.log_A_real = self._ssm(torch.full((H, half), math.log(0.5)), ssm_lr)
        self.A_imag = self._ssm(math.pi * torch.arange(half, dtype=torch.float32).expand(H, half).clone(), ssm_lr)
        self.D = nn.Parameter(torch.randn(H))
        self.dropout = dropout
        self.mix = nn.Conv1d(H, 2 * H, kernel_size=1)

    @staticmethod
    def _ssm(value: torch.Tensor, lr: float | None) -> nn.Parameter:
        # the authors tag A and Δ for their own optimizer group: no weight decay, and `lr` when given
        param = nn.Parameter(value)
        param._optim = {"weight_decay": 0.0, **({} if lr is None else {"lr": lr})}
        return param

    def kernel(self, L: int) -> torch.Tensor:
        """The convolution kernel K (H, L) of the current parameters."""
        dt = torch.exp(self.log_dt).unsqueeze(-1)                                  # (H, 1)
        A = torch.complex(-torch.exp(self.log_A_real), self.A_imag)                # (H, N/2)
        C = torch.view_as_complex(self.C) * (torch.exp(dt * A) - 1.0) / A          # ZOH with B = 1
        powers = torch.exp((dt * A).unsqueeze(-1) * torch.arange(L, device=A.device))  # (H, N/2, L)
        return 2 * torch.einsum("hn,hnl->hl", C, powers).real

    def ssm(self, u: torch.Tensor) -> torch.Tensor:
        """The SSM alone: u (B, H, L) -> K * u + D u, (B, H, L)."""
        L = u.shape[-1]
        k = self.kernel(L)
        y = torch.fft.irfft(torch.fft.rfft(u, n=2 * L) * torch.fft.rfft(k, n=2 * L), n=2 * L)[..., :L]
        return y + u * self.D.unsqueeze(-1)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        y = channel_dropout(F.gelu(self.ssm(u)), self.dropout, self.training)
        return F.glu(self.mix(y), dim=1)


def channel_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """x (B, H, L) with whole channels zeroed with probability p (and the rest scaled by 1/(1-p))."""
    if not training or p == 0.0:
        return x
    keep = torch.empty(x.shape[0], x.shape[1], 1, device=x.device, dtype=x.dtype).bernoulli_(1.0 - p)
    return x * keep / (1.0 - p)


class PeerModel(nn.Module):
    """example.py's backbone: x (B, L, d_input) -> logits (B, d_output).

    Linear encoder; per layer z = channel_dropout(S4D(x)), x = LayerNorm(x + z) (post-norm, the default);
    mean over time; linear decoder.
    """

    def __init__(self, d_input: int, d_output: int, d_model: int = 256, n_layers: int = 4, dropout: float = 0.1,
                 d_state: int = 64, ssm_lr: float | None = 0.001):
        super().__init__()
        self.encoder = nn.Linear(d_input, d_model)
        self.layers = nn.ModuleList(PeerS4D(d_model, d_state, dropout, ssm_lr=ssm_lr) for _ in range(n_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_layers))
        self.dropout = dropout
        self.decoder = nn.Linear(d_model, d_output)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.encoder(x).transpose(1, 2)                                        # (B, H, L)
        for layer, norm in zip(self.layers, self.norms):
            z = channel_dropout(layer(x), self.dropout, self.training)
            x = norm((x + z).transpose(1, 2)).transpose(1, 2)
        return self.decoder(x.mean(dim=-1))


def peer_optimizer(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW as example.py sets it up: untagged parameters at (lr, weight_decay), each distinct tag its own group."""
    plain = [p for p in model.parameters() if not hasattr(p, "_optim")]
    optimizer = torch.optim.AdamW(plain, lr=lr, weight_decay=weight_decay)
    tagged: dict[tuple, list[nn.Parameter]] = {}
    for p in model.parameters():
        if hasattr(p, "_optim"):
            tagged.setdefault(tuple(sorted(p._optim.items())), []).append(p)
    for tag, params in tagged.items():
        optimizer.add_param_group({"params": params, **dict(tag)})
    return optimizer


# ---------------------------------------------------------------------------------------------------------
# Training both on one DataModule


def batches(loader, steps: int):
    """`steps` batches from `loader`, starting a new epoch when one runs out."""
    done = 0
    while True:
        for batch in loader:
            if done == steps:
                return
            yield batch
            done += 1


@torch.no_grad()
def accuracy(model, loader, forward) -> float:
    """Fraction of `loader`'s examples whose argmax of forward(model, inputs) equals the label."""
    model.eval()
    correct = total = 0
    for batch in loader:
        logits = forward(model, batch)
        correct += int((logits.argmax(-1) == batch["labels"]).sum())
        total += len(batch["labels"])
    return correct / max(total, 1)


def train_peer(data, steps: int, d_model: int, n_layers: int, lr: float, weight_decay: float, dropout: float,
               seed: int) -> dict:
    """Train the peer on `data` (a set-up seqssm image DataModule) for `steps` steps; test accuracy and seconds."""
    torch.manual_seed(seed)
    model = PeerModel(data.d_input, data.n_classes, d_model, n_layers, dropout, ssm_lr=min(0.001, lr))
    optimizer = peer_optimizer(model, lr, weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    generator = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(data.splits["train"], batch_size=data.batch_size, shuffle=True,
                                         collate_fn=data.collate(), generator=generator)
    model.train()
    start = time.perf_counter()
    for batch in batches(loader, steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(batch["inputs"]), batch["labels"])
        loss.backward()
        optimizer.step()
        schedule.step()
    seconds = time.perf_counter() - start
    acc = accuracy(model, data.test_dataloader(), lambda m, b: m(b["inputs"]))
    return {"model": "peer: S4 example.py (S4D)", "test_acc": acc, "train_seconds": seconds,
            "parameters": sum(p.numel() for p in model.parameters()), "final_loss": loss.item()}


def recipe_cli(recipe: str, data_dir: str, steps: int, seed: int, root: str, extra: list[str]):
    """The `seqssm fit` CLI of `recipe` on `data_dir`, stopping after `steps` optimizer steps (not yet run)."""
    from seqssm.cli import make_cli

    args = ["--config", recipe, "--data.init_args.data_dir", data_dir, "--data.init_args.num_workers", "0",
            "--trainer.max_steps", str(steps), "--trainer.max_epochs", "-1", "--seed_everything", str(seed),
            "--trainer.default_root_dir", root, "--trainer.enable_progress_bar", "false",
            "--trainer.enable_model_summary", "false", "--trainer.logger", "false",
            "--trainer.limit_val_batches", "0", *extra]
    argv, sys.argv = sys.argv, sys.argv[:1]  # the CLI gets `args` only (it warns when it also sees this script's)
    try:
        return make_cli(args, run=False)
    finally:
        sys.argv = argv


def train_recipe(cli, steps: int) -> dict:
    """Fit the recipe's task as `seqssm fit` does; test accuracy on the whole test split and seconds."""
    start = time.perf_counter()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    seconds = time.perf_counter() - start
    if cli.trainer.global_step != steps:
        raise RuntimeError(f"the recipe ran {cli.trainer.global_step} optimizer steps, not {steps}")
    acc = accuracy(cli.model, cli.datamodule.test_dataloader(),
                   lambda m, b: m(b["inputs"], b.get("lengths")))
    return {"model": "seqssm recipe", "test_acc": acc, "train_seconds": seconds,
            "parameters": sum(p.numel() for p in cli.model.parameters())}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default="smnist/cpu/simple-s4d",
                   help="a seqssm sMNIST / psMNIST recipe: a packaged recipe's name or a file")
    p.add_argument("--data_dir", default="data/mnist", help="folder of the four MNIST IDX files")
    p.add_argument("--steps", type=int, default=600, help="optimizer steps for each model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--peer_d_model", type=int, default=None, help="peer width (default: the recipe's d_model)")
    p.add_argument("--peer_n_layers", type=int, default=None, help="peer depth (default: the recipe's n_layers)")
    p.add_argument("--peer_lr", type=float, default=0.01, help="example.py's default")
    p.add_argument("--peer_weight_decay", type=float, default=0.0,
                   help="0.0 as example.py's docstring trains MNIST (its default 0.01 is for CIFAR)")
    p.add_argument("--peer_dropout", type=float, default=0.1, help="example.py's default")
    p.add_argument("--only", choices=("peer", "recipe"), default=None, help="train just one of the two")
    p.add_argument("--root", default=None, help="trainer.default_root_dir of the recipe run (default: a new "
                                                "temporary folder, removed afterwards)")
    p.add_argument("--json", default=None, help="also write the results to this file")
    p.epilog = "Other options go to the recipe's `seqssm fit`, e.g. --model.init_args.lr 0.005."
    args, args.overrides = p.parse_known_args(argv)
    if args.steps < 1:
        p.error(f"--steps must be >= 1, got {args.steps}")
    if args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    try:
        args.recipe = str(find_recipe(args.recipe))
    except RecipeError as e:
        p.error(f"--recipe: {e}")
    return args


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="peer_recipe_check-") as tmp:
        return run(args, args.root or tmp)


def run(args: argparse.Namespace, root: str) -> list[dict]:
    """Train what `args` asks for, the recipe's run in `root`; print (and write) the results."""
    cli = recipe_cli(args.recipe, args.data_dir, args.steps, args.seed, root, args.overrides)
    data, config = cli.datamodule, cli.model.model.config
    data.setup("fit")
    if data.d_input is None:
        sys.exit(f"{args.recipe}: the peer reads numeric pixels (mode: numeric); this recipe's data are tokens")
    results = []
    if args.only != "peer":
        results.append(train_recipe(cli, args.steps))
    if args.only != "recipe":
        results.append(train_peer(data, args.steps, args.peer_d_model or config.d_model,
                                  args.peer_n_layers or config.n_layers, args.peer_lr, args.peer_weight_decay,
                                  args.peer_dropout, args.seed))
    setting = {"recipe": args.recipe, "data_dir": args.data_dir, "steps": args.steps, "batch_size": data.batch_size,
               "seed": args.seed, "threads": args.threads, "overrides": args.overrides,
               "train_examples": len(data.splits["train"]), "test_examples": len(data.splits["test"])}
    print(f"{args.steps} steps of batch {data.batch_size} on {args.data_dir} ({setting['train_examples']} train / "
          f"{setting['test_examples']} test), seed {args.seed}, {args.threads} thread(s)")
    for r in results:
        print(f"  {r['model']:<28} test accuracy {r['test_acc']:.4f}   {r['train_seconds']:7.1f} s   "
              f"{r['parameters']:,} parameters")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"setting": setting, "results": results}, indent=2))
    return results


if __name__ == "__main__":
    main()
