"""The workers that run one `Run` in its folder: a `seqssm fit` config (Lightning), a `seqssm rl` config, a model
surgery. Each takes (run_dir, config, progress) and returns a JSON-able result; progress(n) reports n units
(training steps or environment steps) done. They run in the main process (--jobs 1) or in worker processes.
"""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path
from typing import Any, Callable

import lightning as L
import torch
from torch import nn

Progress = Callable[[int], None]
PROGRESS_EVERY = 10  # training steps between progress reports of a fit
RL_KEYS = ("iteration", "steps", "episodes", "episodic_return", "episode_length", "mmer", "wall_s", "eval")


def quiet_worker() -> None:
    """Silence Lightning's per-run banners and known warnings in a worker process: the bars show the progress."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")


# -- seqssm fit ----------------------------------------------------------------------------------------------------
class FitProgress(L.Callback):
    """Reports training steps to `progress` and keeps every validation's metrics (the learning curve)."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.curve: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step % PROGRESS_EVERY == 0:
            self.progress(trainer.global_step)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(("val_", "train_"))}
        self.curve.append({"step": trainer.global_step, **metrics})


def fit(run_dir: Path, config: dict, progress: Progress) -> dict:
    """Train a `seqssm fit` config in run_dir (its default_root_dir) -> final and best validation metric, learning
    curve, wall-clock and parameter count. An interrupted earlier attempt's checkpoints are deleted first."""
    from seqssm.recipes import merge
    from seqssm.study.fitting import fit_in_folder

    config = merge(config, {"trainer": {"default_root_dir": str(run_dir), "enable_progress_bar": False,
                                        "enable_model_summary": False, "num_sanity_val_steps": 0}})
    tracker = FitProgress(progress)
    cli, clock = fit_in_folder(run_dir, config, [tracker])
    task, metric = cli.model, f"val_{cli.model.metric_name}"
    checkpoint = cli.trainer.checkpoint_callback
    best = None if checkpoint is None or checkpoint.best_model_score is None else float(checkpoint.best_model_score)
    return {"metric": metric, "final": tracker.curve[-1][metric] if tracker.curve else math.nan, "best": best,
            "curve": tracker.curve, "steps": cli.trainer.global_step, "fit_s": round(clock.fit_s, 2),
            "step_s": round(clock.step_s, 2), "median_step_s": round(clock.median_step_s, 5),
            "n_params": sum(p.numel() for p in task.model.parameters()),
            "checkpoint": str(run_dir / "checkpoints" / "last.ckpt")}


def surgery(run_dir: Path, config: dict, progress: Progress) -> dict:
    """config {operation: a function of seqssm.models.surgery, parents: [checkpoint paths]} -> the seqssm folder of
    the result (run_dir/model)."""
    from seqssm.models import surgery as operations
    from seqssm.models.hub import save_pretrained

    model = getattr(operations, config["operation"])(*config["parents"])
    folder = save_pretrained(model, run_dir / "model", overwrite=True)
    return {"folder": str(folder), "n_params": operations.count_parameters(model)}


# -- seqssm rl -----------------------------------------------------------------------------------------------------
class Memoryless(nn.Module):
    """A memory core without memory: x (B, L, d) -> GELU(Linear(x)) per step, an empty state. The MLP baseline of
    Lu et al. 2023, table 5 (and the FF model of van Gelooven 2025 thesis, 5.2), behind the layer contract."""

    causal = True

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.proj(x))

    def scan(self, x, state=(), resets=None, mask=None):
        return self(x), ()

    def step(self, x_t, state=()):
        return self(x_t), ()

    def initial_state(self, batch_size: int, device=None, dtype=None):
        return ()


def build_algorithm(config):
    """`seqssm.rl.runner.build(config)`, except that a PPO core `layer: none` builds the Memoryless agent."""
    from seqssm.rl.agent import ActorCritic
    from seqssm.rl.envs import make_vector_env
    from seqssm.rl.runner import build

    core = getattr(config.agent, "core", None)
    if core is None or core.layer != "none":
        return build(config)
    torch.manual_seed(config.seed)
    envs = make_vector_env(config.env, config.algo.num_envs)
    agent = ActorCritic(Memoryless(core.d_model), envs.single_observation_space, envs.single_action_space,
                        encoder=config.agent.encoder, actor=config.agent.actor, critic=config.agent.critic,
                        activation=config.agent.activation)
    return config.spec.algorithm(agent, envs, config.algo, seed=config.seed)


def rl(run_dir: Path, config: dict, progress: Progress) -> dict:
    """Train a `seqssm rl` config -> summary, curve, timing and the final evaluation (its `final_eval`)."""
    from seqssm.rl.config import RunConfig, validate
    from seqssm.rl.runner import check_env, evaluate_sets, run_iterations

    run_config = RunConfig.from_dict({**config, "out_dir": None})
    validate(run_config)
    check_env(run_config)
    threads = torch.get_num_threads()
    if run_config.threads:
        torch.set_num_threads(run_config.threads)
    try:
        algo = build_algorithm(run_config)
        agent, curve = algo.agent, []
        evaluate_fn = (lambda: evaluate_sets(agent, run_config)) if run_config.env.eval_sets else None

        def on_record(record: dict) -> None:
            progress(record["steps"])
            curve.append({k: record[k] for k in RL_KEYS if k in record})

        summary = run_iterations(algo, run_config.eval.every, evaluate_fn, run_config.target_return,
                                 run_config.time_limit_s, on_record)
        algo.envs.close()
        final = evaluate_sets(agent, run_config, final=True) if run_config.final_eval.episodes else {}
    finally:
        torch.set_num_threads(threads)
    summary.pop("last", None)
    return {"summary": summary, "curve": curve, "final": final, "steps": summary["steps"],
            "train_wall_s": summary["wall_s"], "us_per_step": 1e6 * summary["wall_s"] / max(summary["steps"], 1),
            "parameters": sum(p.numel() for p in agent.parameters() if p.requires_grad)}


WORKERS: dict[str, Callable[[Path, dict, Progress], dict]] = {"fit": fit, "surgery": surgery, "rl": rl}
