"""The reinforcement-learning claims: PPO memory cores on POPGym's RepeatPrevious, the Memory Corridor and the
memory-length T-maze, and SAC history encoders on Best Arm Identification. Every run is a `seqssm rl` config
from seqssm/recipes/reproduce/<claim>/, trained by the RL runner's loop (`seqssm.rl.runner.run_iterations`)."""

from __future__ import annotations

import math
import numpy as np

from seqssm.errors import ReproduceError

from . import plots
from .claim import Claim, Measurements, Metric, Run

LU = "Lu et al. 2023, \"Structured State Space Models for In-Context Reinforcement Learning\""
VAN_GELOOVEN = ("van Gelooven 2025, MSc thesis \"On the Application of State Space Models to Partially Observable "
                "Markov Decision Processes\"")
KALMAN = ("\"Uncertainty Representations in State-Space Layers for Deep Reinforcement Learning under Partial "
          "Observability\" (the Kalman-layer paper)")


class RLClaim(Claim):
    """Runs every arm's recipe (seqssm/recipes/reproduce/<claim>/<arm>.yaml) at every seed and, if `sweep` names an env
    kwarg, at every value of it (`sweep_values`); training steps scaled by the budget."""

    recipes_of: dict[str, str] = {}  # arm -> recipe file
    sweep: str | None = None  # env kwarg swept (e.g. memory_length), its values in sweep.yaml

    def prepare(self) -> list[str]:
        """Check that the RL extra is installed (before any run starts)."""
        try:
            import gymnasium  # noqa: F401
            import popgym  # noqa: F401
        except ModuleNotFoundError as e:
            raise ReproduceError(f"claim {self.name} needs the RL extra ({e.name} is missing): "
                                 "pip install 'seqssm[rl]'") from None
        return []

    def sweep_values(self) -> list:
        """The swept values (sweep.yaml's list named like the kwarg); [None] without a sweep."""
        if self.sweep is None:
            return [None]
        return list(self.recipe("sweep.yaml", "sweep")[self.sweep])

    def config(self, arm: str, seed: int, value) -> dict:
        """The `seqssm rl` config of one run."""
        config = self.recipe(self.recipes_of[arm], arm=arm)
        algo = config["algorithm"]
        section = config[algo]
        multiple = section["num_envs"] * (section["unroll"] if algo == "ppo" else 1)
        section["total_steps"] = self.scaled(section["total_steps"], multiple)
        if value is not None:
            config["env"]["kwargs"] = {**config["env"].get("kwargs", {}), self.sweep: value}
        return {**config, "seed": seed, "out_dir": None}

    def runs(self) -> list[Run]:
        runs = []
        for arm in self.arms:
            for value in self.sweep_values():
                for seed in self.seeds():
                    config = self.config(arm, seed, value)
                    key = f"{arm}/seed{seed}" if value is None else f"{arm}/{self.sweep}={value}/seed{seed}"
                    runs.append(Run(key, arm, seed, "rl", config, config[config["algorithm"]]["total_steps"]))
        return runs

    def results(self, records: dict[str, dict], arm: str, value=None) -> list[dict]:
        """The finished results of `arm` (at sweep value `value`; None: the runs without a sweep), in seed order."""
        keys = [f"{arm}/seed{s}" if value is None else f"{arm}/{self.sweep}={value}/seed{s}" for s in self.seeds()]
        return [records[k]["result"] for k in keys if k in records]


def upto(result: dict, at: float) -> list[dict]:
    """The run's curve records (one per iteration) up to fraction `at` of its environment steps."""
    return [c for c in result["curve"] if c["steps"] <= at * result["steps"]]


def mmer_at(result: dict, at: float) -> float | None:
    """The MMER (best iteration's mean episodic return so far) at fraction `at` of the run's steps."""
    if at == 1:
        return result["summary"]["mmer"]
    seen = [c["mmer"] for c in upto(result, at) if c.get("mmer") is not None]
    return seen[-1] if seen else None


def us_per_step_at(result: dict, at: float) -> float | None:
    """Training microseconds per environment step over the run's first fraction `at`."""
    if at == 1:
        return result["us_per_step"]
    seen = [c for c in upto(result, at) if c.get("wall_s")]
    return 1e6 * seen[-1]["wall_s"] / seen[-1]["steps"] if seen else None


def return_curves(results: list[dict], key: str = "episodic_return") -> tuple[list[int], list[list[float]]]:
    """(env steps, [per seed: the training curve's `key` per iteration]) of aligned PPO runs (nan where no episode
    ended in an iteration)."""
    if not results:
        return [], []
    steps = [r["steps"] for r in results[0]["curve"]]
    return steps, [[r.get(key, math.nan) if r.get(key) is not None else math.nan for r in res["curve"]]
                   for res in results]


class RepeatPrevious(RLClaim):
    name = "repeat-previous"
    title = "S5 vs GRU vs MLP with PPO on POPGym RepeatPrevious"
    source = f"{LU}, 4.2, table 5 and fig. 2"
    claim = ("on POPGym's RepeatPreviousHard, PPO with an S5 memory reaches an MMER of 0.91 ± 0.01 where the GRU "
             "reaches -0.46 ± 0.01 and the memoryless MLP -0.48 ± 0.00 (table 5, eight seeds), and S5 runs over six "
             "times faster than the GRU (fig. 2b). Here: RepeatPreviousMedium (k = 32 cards back over two decks), "
             "the hardest level that learns within a CPU budget, for which the paper reports no numbers; S5 "
             "parameter-matched to the GRU as in the paper's appendix C.")
    arms = ("s5", "gru", "mlp")
    recipes_of = {"s5": "s5.yaml", "gru": "gru.yaml", "mlp": "mlp.yaml"}
    metrics = (Metric("mmer", "MMER"), Metric("us_per_step", "µs per env step (training)", ".0f"),
               Metric("final", "mean return, last 10% of iterations"))

    def measure(self, records, at=1.0):
        m = Measurements()
        for arm in self.arms:
            results = self.results(records, arm)
            for r in results:
                m.add(arm, "mmer", mmer_at(r, at))
                m.add(arm, "us_per_step", us_per_step_at(r, at))
                returns = [c["episodic_return"] for c in upto(r, at) if c.get("episodic_return") is not None]
                m.add(arm, "final", float(np.mean(returns[-max(1, len(returns) // 10):])) if returns else None)
            m.curves[arm] = return_curves(results)
        return m

    def plot(self, m, folder):
        plt = plots.pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [2, 1]})
        plots.curves(left, m.curves, "environment steps", "mean episodic return")
        left.set_title("(a) RepeatPreviousMedium")
        plots.bars(right, {a: m.values.get(a, {}).get("us_per_step", []) for a in self.arms}, "µs per env step")
        right.set_title("(b) training time per step")
        return [plots.save(fig, folder / "repeat_previous.png")]


def corridors_opened(episode_return: float) -> int:
    """Corridors a Memory Corridor episode opened: opening corridor j earns j, a failed pass earns less than m + 1
    after m opened ones, so m is the largest with m(m + 1)/2 <= return."""
    m = int((math.sqrt(8 * episode_return + 1) - 1) / 2)
    while (m + 1) * (m + 2) / 2 <= episode_return:
        m += 1
    while m * (m + 1) / 2 > episode_return:
        m -= 1
    return m


class MemoryCorridor(RLClaim):
    name = "memory-corridor"
    title = "S5 / minGRU vs GRU on the Memory Corridor"
    source = f"{VAN_GELOOVEN}, 4.5, 5.2 (table 5.1) and 5.3 (figs. 5.5, 5.6)"
    claim = ("S5 memories outperform GRU memories on the Memory Corridor at every latent size tried (5.3, figs. 5.5 "
             "and 5.6; figures without numbers); across the popjaxrl environments minGRU also beats the GRU "
             "(normalised MMER S5 0.82, minGRU 0.71, GRU 0.53) in a fraction of its runtime (253 s, 214 s, 766 s; "
             "table 5.1). Success rate vs corridor length: the share of evaluation episodes that open at least n "
             "corridors.")
    arms = ("s5", "mingru", "gru")
    recipes_of = {arm: f"{arm}.yaml" for arm in arms}
    metrics = (Metric("mmer", "best return (training MMER)", ".2f"), Metric("opened", "corridors opened (eval)", ".2f"),
               Metric("us_per_step", "µs per env step", ".0f"))

    def measure(self, records, at=1.0):
        m = Measurements()
        length = self.recipe("base.yaml")["env"]["kwargs"]["length"]
        success: dict[str, dict[float, list[float]]] = {}
        for arm in self.arms:
            results = self.results(records, arm)
            for r in results:
                m.add(arm, "mmer", mmer_at(r, at))
                m.add(arm, "us_per_step", us_per_step_at(r, at))
                if at < 1:
                    continue  # the evaluation episodes are played after training only
                opened = [corridors_opened(x) for x in r["final"]["eval"]["returns"]]
                m.add(arm, "opened", float(np.mean(opened)))
                for n in range(1, length + 1):
                    success.setdefault(arm, {}).setdefault(n, []).append(float(np.mean([o >= n for o in opened])))
            m.curves.setdefault("learning", {})[arm] = return_curves(results)
        m.curves["success"] = success
        return m

    def plot(self, m, folder):
        plt = plots.pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        plots.against(left, m.curves["success"], "corridor length n", "success rate (opened >= n)")
        left.set_title("success rate vs corridor length")
        plots.curves(right, m.curves["learning"], "environment steps", "mean episodic return")
        right.set_title("learning curves (cf. fig. 5.5)")
        return [plots.save(fig, folder / "memory_corridor.png")]


class BestArm(RLClaim):
    name = "best-arm"
    title = "vSSM+KF vs vSSM vs GRU on Best Arm Identification (SAC)"
    source = f"{KALMAN}, 5.2, figs. 4 and 5, appendix D"
    claim = ("among the memory-based agents vSSM+KF reaches the highest return both in distribution (σ ~ U(0, 2)) "
             "and out of it (σ ~ U(2, 3)), matching the Oracle in distribution, and it plays longer episodes: it asks "
             "for more samples before deciding (fig. 4, 500k steps, five seeds; figures without numbers).")
    arms = ("vssm+kf", "vssm", "gru", "oracle")
    recipes_of = {"vssm+kf": "kalman.yaml", "vssm": "vssm.yaml", "gru": "gru.yaml", "oracle": "oracle.yaml"}
    metrics = (Metric("return_in", "normalised return (in dist.)"), Metric("return_ood", "normalised return (OOD)"),
               Metric("len_in", "episode length (in dist.)", ".1f"), Metric("len_ood", "episode length (OOD)", ".1f"),
               Metric("win_in", "win rate (in dist.)"), Metric("win_ood", "win rate (OOD)"))

    def measure(self, records, at=1.0):
        m = Measurements()
        win_reward = self.recipe("base.yaml")["env"]["kwargs"].get("win_reward", 10.0)
        for arm in self.arms:
            results = self.results(records, arm)
            for r in results:
                evals = [c["eval"] for c in upto(r, at) if "eval" in c]
                if at < 1 and not evals:
                    continue  # no evaluation yet at that point of training
                for split, name in (("in", "in_dist"), ("ood", "ood")):
                    final = r["final"][name] if at == 1 else evals[-1][name]
                    m.add(arm, f"win_{split}", final["win"])
                    m.add(arm, f"len_{split}", final["length_mean"])
                    m.add(arm, f"return_{split}", final["return_mean"] / win_reward)
            for split in ("in_dist", "ood"):
                steps = [c["steps"] for c in results[0]["curve"] if "eval" in c] if results else []
                wins = [[c["eval"][split]["win"] for c in r["curve"] if "eval" in c] for r in results]
                m.curves.setdefault(split, {})[arm] = (steps, wins)
        if any(m.curves.get("in_dist", {}).values()):
            m.notes.append(self.convergence(m))
        return m

    def convergence(self, m: Measurements) -> str:
        """How much each arm's in-distribution win rate moved over the last third of training (the curve's plateau)."""
        parts = []
        for arm, (steps, wins) in m.curves["in_dist"].items():
            if not wins or len(wins[0]) < 3:
                continue
            mean_curve, _ = plots.mean_band(wins)
            third = max(1, len(mean_curve) // 3)
            parts.append(f"{arm} {mean_curve[-third - 1]:.3f} -> {mean_curve[-1]:.3f}")
        return ("Convergence: in-distribution win rate (seed mean) at two thirds of training -> at the end: "
                + ", ".join(parts) + ".")

    def plot(self, m, folder):
        plt = plots.pyplot()
        fig, axes = plt.subplots(2, 2, figsize=(10, 7))
        for col, (split, label) in enumerate((("in", "in distribution"), ("ood", "out of distribution"))):
            plots.bars(axes[0, col], {a: m.values.get(a, {}).get(f"win_{split}", []) for a in self.arms},
                       "win rate")
            axes[0, col].set_title(f"win rate, {label}")
            plots.bars(axes[1, col], {a: m.values.get(a, {}).get(f"len_{split}", []) for a in self.arms},
                       "episode length")
            axes[1, col].set_title(f"episode length, {label}")
        out = [plots.save(fig, folder / "best_arm.png")]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, split in zip(axes, ("in_dist", "ood")):
            plots.curves(ax, m.curves[split], "environment steps", f"win rate ({split})")
        return out + [plots.save(fig, folder / "best_arm_learning.png")]


# bsuite's memory_len analysis (Osband et al. 2020, bsuite): a length is solved when, over the first 10,000 training
# episodes (all of them if fewer), the regret against perfection is under 0.75 of a random agent's, i.e. fewer
# than 37.5% of the episodes are imperfect
BSUITE_EPISODES = 10_000
BSUITE_IMPERFECT = 0.375


def imperfect_share(curve: list[dict]) -> float | None:
    """The share of imperfect training episodes (return -1 instead of +1) over the first BSUITE_EPISODES episodes of
    a T-maze run's curve records (per iteration: episodes ended and their mean return); None if none ended."""
    episodes = imperfect = 0.0
    for c in curve:
        n = min(c.get("episodes") or 0, BSUITE_EPISODES - episodes)
        if n <= 0 or c.get("episodic_return") is None:
            continue
        episodes += n
        imperfect += n * (1 - c["episodic_return"]) / 2  # returns are +1 or -1: the mean gives the share
    return imperfect / episodes if episodes else None


class MemoryLength(RLClaim):
    name = "memory-length"
    title = "Memory length solved by S5 vs GRU (bsuite memory_len T-maze)"
    source = f"{LU}, 4.1, fig. 1 and table 1"
    claim = ("S5 far outperforms the LSTM across bsuite memory lengths, in return and in speed (fig. 1, five seeds; "
             "figures without numbers), and reaches bsuite's perfect memory-length score where RNNs do not "
             "(table 1). The paper trains A2C with an LSTM; here PPO with the GRU as the RNN baseline.")
    arms = ("s5", "gru")
    recipes_of = {"s5": "s5.yaml", "gru": "gru.yaml"}
    sweep = "memory_length"
    metrics = (Metric("solve_rate", "solve rate (share of lengths solved, bsuite's rule)", ".2f"),
               Metric("return_all", "greedy return, mean over lengths"),
               Metric("us_per_step", "µs per env step", ".0f"))

    def measure(self, records, at=1.0):
        m = Measurements()
        values = self.sweep_values()
        by_length: dict[str, dict[float, list[float]]] = {}
        solved: dict[str, dict[float, list[bool]]] = {}
        for arm in self.arms:
            for seed in self.seeds():
                keys = [f"{arm}/{self.sweep}={v}/seed{seed}" for v in values]
                if not all(k in records for k in keys):
                    continue  # a seed counts only with every length finished
                results = [records[k]["result"] for k in keys]
                shares = [imperfect_share(upto(r, at)) for r in results]
                if None in shares:
                    continue  # no episode ended yet at that point
                for value, share in zip(values, shares):
                    solved.setdefault(arm, {}).setdefault(value, []).append(share < BSUITE_IMPERFECT)
                m.add(arm, "solve_rate", float(np.mean([share < BSUITE_IMPERFECT for share in shares])))
                m.add(arm, "us_per_step", float(np.mean([us_per_step_at(r, at) for r in results])))
                if at < 1:
                    continue  # the greedy episodes are played after training only
                returns = [r["final"]["eval"]["return_mean"] for r in results]
                for value, ret in zip(values, returns):
                    by_length.setdefault(arm, {}).setdefault(value, []).append(ret)
                m.add(arm, "return_all", float(np.mean(returns)))
        m.curves["return"] = by_length
        shortest = values[0]
        rates = {arm: np.mean(v["solve_rate"]) for arm, v in m.values.items() if v.get("solve_rate")}
        if rates:
            best = max(rates, key=rates.get)
            at_shortest = solved[best][shortest]
            m.preconditions.append((f"one arm reliably solves: the better arm ({best}) solves the shortest length "
                                    f"({shortest}) in every seed ({sum(at_shortest)} of {len(at_shortest)})",
                                    all(at_shortest)))
        return m

    def plot(self, m, folder):
        plt = plots.pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        plots.against(left, m.curves["return"], "memory length", "greedy return")
        left.set_xscale("log", base=2)
        left.set_title("(c) return vs memory length")
        plots.bars(right, {a: m.values.get(a, {}).get("us_per_step", []) for a in self.arms}, "µs per env step")
        right.set_title("(b) runtime, longest memory")
        return [plots.save(fig, folder / "memory_length.png")]

