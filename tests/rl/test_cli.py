"""`seqssm rl` / `seqssm rl-eval`: the algorithm field, every recipe, PPO and SAC end to end, and bad input: one
line naming the option (exit code 2), nothing written before everything is validated, no run overwritten."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import yaml

from seqssm.cli import main as seqssm_main
from seqssm.rl.cli import algorithm_of, main, rl_parser
from seqssm.rl.config import RunConfig, validate
from seqssm.recipes import read_recipe
from seqssm.rl import runner
from seqssm.rl.runner import build, check_env

RECIPES = sorted(Path("seqssm/recipes/rl").rglob("*.yaml"))
# the arms of the RL reproductions, each `_base_: base.yaml`; mlp.yaml's `layer: none` is the reproduce worker's own
# memoryless core (seqssm.study.reproduce.work.Memoryless), not a `seqssm rl` layer; claim.yaml (the comparisons)
# and full.yaml (the source's settings) are no arms
REPRODUCE_ARMS = sorted(p for claim in ("repeat-previous", "memory-corridor", "best-arm", "memory-length")
                        for p in Path("seqssm/recipes/reproduce", claim).glob("*.yaml")
                        if p.name not in ("base.yaml", "smoke.yaml", "sweep.yaml", "mlp.yaml", "claim.yaml",
                                          "full.yaml"))
TINY_PPO = ["--ppo.total_steps", "512", "--ppo.num_envs", "4", "--ppo.unroll", "64", "--ppo.minibatches", "2",
            "--ppo.epochs", "1", "--agent.core.d_model", "8", "--agent.core.d_state", "4", "--agent.encoder", "[8]",
            "--agent.actor", "[8]", "--agent.critic", "[8]"]


def test_there_are_recipes():
    assert len(RECIPES) >= 20


@pytest.mark.parametrize("recipe", RECIPES, ids=str)
def test_every_recipe_says_its_algorithm_and_parses(recipe):
    algorithm = yaml.safe_load(recipe.read_text())["algorithm"]
    assert algorithm_of(["--config", str(recipe)]) == algorithm
    parser = rl_parser(algorithm)
    init = parser.instantiate(parser.parse_args(["--config", str(recipe)]))
    config = RunConfig(algorithm=algorithm, env=init.env, agent=init.agent, algo=init[algorithm], eval=init.eval)
    validate(config)
    check_env(config)


@pytest.mark.parametrize("recipe", REPRODUCE_ARMS, ids=str)
def test_reproduction_arms_run_by_hand_with_their_base_and_final_evaluation(recipe):
    settings = read_recipe(recipe)
    algorithm = settings["algorithm"]
    assert algorithm_of(["--config", str(recipe)]) == algorithm  # the base says it
    parser = rl_parser(algorithm)
    init = parser.instantiate(parser.parse_args(["--config", str(recipe)]))
    config = RunConfig(algorithm=algorithm, env=init.env, agent=init.agent, algo=init[algorithm], eval=init.eval,
                       final_eval=init.final_eval)
    final_eval = config.to_dict()["final_eval"]
    assert {key: final_eval[key] for key in settings.get("final_eval", {})} == settings.get("final_eval", {})
    validate(config)
    check_env(config)


def test_the_algorithm_is_read_like_every_other_key(tmp_path):
    sac = tmp_path / "sac.yaml"
    sac.write_text("algorithm: sac\n")
    assert algorithm_of([]) == "ppo"
    assert algorithm_of(["--config", str(sac)]) == "sac"
    assert algorithm_of(["--config", str(sac), "--algorithm", "ppo"]) == "ppo"
    assert algorithm_of(["--algorithm=sac", "--agent.core.layer", "gru", "--help"]) == "sac"
    assert algorithm_of(["--config", "seqssm/recipes/rl/repeat_first_easy/s5.yaml", "--config", str(sac)]) == "sac"


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """(exit code, stderr) of `seqssm ARGV` through the package's entry point."""
    with pytest.raises(SystemExit) as exit_info:
        seqssm_main(argv)
    return exit_info.value.code, capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--ppo.num_envs", "-4"], "--ppo.num_envs = -4 is out of range: must be >= 1"),
    (["--ppo.minibatches", "0"], "--ppo.minibatches = 0 is out of range: must be >= 1"),
    (["--ppo.minibatches", "3"], "--ppo.minibatches = 3 must divide --ppo.num_envs = 16"),
    (["--agent.core.layer", "lstm"], "--agent: unknown sequence layer 'lstm'"),
    (["--env.name", "RepeatFirstEsy"],
     "--env.name: unknown environment 'RepeatFirstEsy'; did you mean RepeatFirstEasy"),
    (["--env.kwargs", "{doors: 3}"], "--env: "),
    (["--env.eval_sets", "{}", "--final_eval.episodes", "4"],
     "--final_eval.episodes: the final evaluation plays env.eval_sets, and there are"),
    (["--final_eval.episodes", "-1"], "--final_eval.episodes = -1 is out of range: must be >= 0"),
    # Before: accepted, then building 10^8 environments hung (issue 27)
    (["--ppo.num_envs", "100000000"], "the ppo run would need about "),
])
def test_bad_ppo_options_are_one_line_with_exit_code_2(args, message, capsys, tmp_path):
    code, err = run_cli(["rl", "--config", "rl/repeat_first_easy/s5", "--out_dir", str(tmp_path / "r"),
                         *args], capsys)
    assert code == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists()


def tiny_config(recipe: str, *args: str) -> RunConfig:
    algorithm = yaml.safe_load(Path(recipe).read_text())["algorithm"]
    parser = rl_parser(algorithm)
    init = parser.instantiate(parser.parse_args(["--config", recipe, *args]))
    return RunConfig(algorithm=algorithm, env=init.env, agent=init.agent, algo=init[algorithm], eval=init.eval,
                     final_eval=init.final_eval, device="cpu")


@pytest.mark.parametrize("recipe, args, per_env, environments", [
    # PPO on RepeatFirstEasy: 4 envs x 64 steps of obs (4 + one-hot previous action 4 + reward + start flag = 10
    # floats), a Discrete action (8 B), a done flag and 5 floats; plus 2 core states per env (added below)
    ("seqssm/recipes/rl/repeat_first_easy/s5.yaml", TINY_PPO, 4 * (64 * (4 * 10 + 8 + 1 + 20)),
     (4, "--ppo.num_envs 4 environments")),
    # SAC: min(buffer_size, total_steps) transitions of obs, one-hot action and reward (float32); it evaluates
    # min(--eval.num_envs 3, 100 episodes) environments beside its 8 training ones
    ("seqssm/recipes/rl/sac/best_arm/kalman.yaml", ["--sac.total_steps", "1000", "--eval.num_envs", "3"], None,
     (11, "--sac.num_envs 8 + 3 evaluating environments")),
    # the final evaluation runs alone, after training: 20 of its environments are more than 8 + 3
    ("seqssm/recipes/rl/sac/best_arm/kalman.yaml", ["--sac.total_steps", "1000", "--eval.num_envs", "20",
                                                    "--eval.episodes", "3", "--final_eval.episodes", "40"], None,
     (20, "20 environments of the final evaluation (--eval.num_envs, --final_eval.episodes)")),
])
def test_buffers_that_cannot_fit_in_memory_are_refused_with_the_estimate(monkeypatch, recipe, args, per_env,
                                                                          environments):
    config = tiny_config(recipe, *args)
    probe = runner.make_env(config.env)
    obs_dim, actions = runner.spaces.flatdim(probe.observation_space), probe.action_space
    agent = config.spec.make_agent(config.agent, config.algo, probe.observation_space, actions)
    state = runner.state_bytes(agent.initial_state(1, device=torch.device("meta")))
    assert state > 0
    need, _ = config.algo.buffer_bytes(obs_dim, actions, state)
    if per_env is not None:  # PPO's arithmetic, by hand
        assert obs_dim == 10 and need == per_env + 4 * 2 * state
    else:
        assert need == 1000 * 4 * (obs_dim + runner.spaces.flatdim(actions) + 1) + config.algo.num_envs * state
    per_env = runner.env_bytes(config.env)
    assert 100 < per_env < 10**6
    count, what = environments
    need += count * per_env
    monkeypatch.setattr(runner, "env_bytes", lambda env: per_env)
    monkeypatch.setattr(runner, "available_memory", lambda device: need - 1)
    with pytest.raises(runner.ConfigError, match=rf"the {config.algorithm} run would need about 0\.0 GiB on cpu \(.*"
                                                 rf" \+ {re.escape(what)} x {per_env} B each, "
                                                 r"measured\), more than the 0\.0 GiB free there"):
        build(config)
    monkeypatch.setattr(runner, "available_memory", lambda device: need)
    build(config).envs.close()


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_rl_eval_refuses_more_environments_than_fit(monkeypatch, capsys, tmp_path, restore_threads):
    out = tmp_path / "run"
    main(["rl", "--config", "rl/repeat_first_easy/s5", *TINY_PPO, "--ppo.total_steps", "256",
          "--out_dir", str(out)])
    monkeypatch.setattr(runner, "available_memory", lambda device: 10**6)
    # Before: finding the divisor of 10^8 episodes looped 10^8 times, then 10^8 environments were built
    code, err = run_cli(["rl-eval", str(out / "last.pt"), "--episodes", "100000000", "--num_envs", "100000000"],
                        capsys)
    assert code == 2 and "rl-eval would need about " in err
    assert "(100000000 environments (--num_envs, --episodes) x" in err
    assert len(err.strip().splitlines()) == 1


def test_available_memory_reads_the_machine():
    free = runner.available_memory(torch.device("cpu"))
    assert 0 < free < 2**50


def test_rl_runs_on_one_cpu_thread_unless_threads_says_otherwise(restore_threads):
    torch.set_num_threads(2)
    assert runner.set_threads(None, torch.device("cpu")) == 1 == torch.get_num_threads()
    assert runner.set_threads(2, torch.device("cpu")) == 2 == torch.get_num_threads()
    assert runner.set_threads(None, torch.device("cuda")) == 2  # a GPU run keeps torch's (or the recipe's)


def test_the_gpu_sized_paper_recipes_set_one_thread_too():
    recipes = sorted(Path("seqssm/recipes/rl/popgym_lu2023").rglob("*.yaml"))
    assert len(recipes) >= 20 and all(yaml.safe_load(r.read_text())["threads"] == 1 for r in recipes)


def test_bad_sac_and_eval_options_are_one_line_with_exit_code_2(capsys, tmp_path):
    code, err = run_cli(["rl", "--config", "rl/sac/best_arm/kalman", "--sac.num_envs", "-2"], capsys)
    assert code == 2 and "--sac.num_envs = -2 is out of range: must be >= 1" in err
    code, err = run_cli(["rl-eval", "seqssm/recipes/rl/sac/best_arm/kalman.yaml", "--episodes", "0"], capsys)
    assert code == 2 and "--episodes = 0 is out of range: must be >= 1" in err
    code, err = run_cli(["rl-eval", "seqssm/recipes/rl/sac/best_arm/kalman.yaml"], capsys)
    assert code == 2 and "unreadable" in err and "weights_only" not in err
    code, err = run_cli(["rl", "--config", "rl/sac/best_arm/kalman", "--final_eval.sets", "[odd]"], capsys)
    assert code == 2 and "--final_eval.sets: ['odd'] not in env.eval_sets (['in_dist', 'ood'])" in err
    code, err = run_cli(["rl", "--config", "rl/sac/best_arm/kalman", "--algorithm", "dqn"], capsys)
    assert code == 2 and "algorithm" in err  # the parser's own message


def test_ppo_trains_checkpoints_evaluates_and_keeps_finished_runs(tmp_path, capsys, restore_threads):
    out = tmp_path / "run"
    summary = main(["rl", "--config", "rl/repeat_first_easy/s5", *TINY_PPO, "--out_dir", str(out)])
    assert "torch CPU threads: 1 (as threads sets; --threads N changes it)" in capsys.readouterr().out
    assert summary["steps"] == 512 and summary["env"] == "RepeatFirstEasy" and summary["algorithm"] == "ppo"
    assert summary["device"] == ("cuda:0" if torch.cuda.is_available() else "cpu")  # --device auto
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2] and all("sps" in r and "mmer" in r for r in records)
    assert json.loads((out / "summary.json").read_text())["steps"] == 512
    assert {p.name for p in out.iterdir()} == {"config.yaml", "metrics.jsonl", "best.pt", "last.pt", "summary.json"}
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["algorithm"] == "ppo" and saved["ppo"]["num_envs"] == 4 and saved["env"]["previous_action_reward"]
    result = main(["rl-eval", str(out / "last.pt"), "--episodes", "6", "--num_envs", "4"])
    assert result["episodes"] == 6 and result["length_mean"] == 51.0 and -1.0 <= result["return_mean"] <= 1.0
    assert result["algorithm"] == "ppo" and result["train_steps"] == 512
    assert '"return_mean"' in capsys.readouterr().out

    # the finished run survives a second command with a bad environment, and one without --overwrite
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, err = run_cli(["rl", "--config", str(out / "config.yaml"), "--env.name", "Nope"], capsys)
    assert code == 2 and "--env.name" in err
    code, err = run_cli(["rl", "--config", str(out / "config.yaml")], capsys)
    assert code == 2 and f"--out_dir {out} is not empty (it holds a finished run)" in err and "--overwrite" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # config.yaml is a recipe that repeats the run: with --overwrite, the same numbers
    main(["rl", "--config", str(out / "config.yaml"), "--overwrite"])
    again = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for r, s in zip(records, again):
        assert {k: v for k, v in r.items() if k not in ("wall_s", "sps")} == {
            k: v for k, v in s.items() if k not in ("wall_s", "sps")}


def test_core_init_from_says_it_replaces_the_recipes_core_and_records_the_core_built(tmp_path, capsys,
                                                                                       restore_threads):
    # Before: an S5 recipe given a mamba-s6 folder trained a Mamba backbone while config.yaml said layer: s5
    from seqssm.models import build
    from seqssm.models.hub import save_pretrained

    save_pretrained(build("mamba-s6", vocab_size=8, n_classes=2, d_model=8, n_layers=2, d_state=4), tmp_path / "mamba")
    out = tmp_path / "run"
    summary = main(["rl", "--config", "rl/repeat_first_easy/s5", *TINY_PPO, "--ppo.total_steps", "256",
                    "--agent.core_init_from", str(tmp_path / "mamba"), "--out_dir", str(out)])
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("--agent.core_init_from")]
    assert said == [f"--agent.core_init_from {tmp_path / 'mamba'}: the core is that model's backbone (layer s6, block "
                    "mamba, 2 layers, d_model 8), not agent.core (layer s5, block residual, 1 layer, d_model 8); "
                    "config.yaml records the core built"]
    core = yaml.safe_load((out / "config.yaml").read_text())["agent"]["core"]
    assert (core["layer"], core["block"], core["n_layers"], core["d_model"], core["d_state"]) == ("s6", "mamba", 2, 8, 4)
    assert summary["memory"] == f"init_from:{tmp_path / 'mamba'}"
    assert main(["rl-eval", str(out / "last.pt"), "--episodes", "2", "--num_envs", "2"])["episodes"] == 2


def test_sac_trains_and_rl_eval_plays_its_evaluation_sets(tmp_path):
    out = tmp_path / "sac"
    summary = main(["rl", "--config", "rl/sac/best_arm/kalman", "--agent.core.layer", "vssm",
                    "--agent.core.d_model", "8", "--agent.core.d_state", "8", "--agent.actor", "[16]",
                    "--agent.critic", "[16]", "--env.kwargs", "{cost: 0.1, max_steps: 20}", "--sac.total_steps", "64",
                    "--sac.num_envs", "4", "--sac.batch_size", "4", "--sac.context", "8", "--sac.learning_starts", "16",
                    "--eval.every", "32", "--eval.episodes", "4", "--final_eval.episodes", "6",
                    "--final_eval.sets", "[ood]", "--out_dir", str(out)])
    assert summary["memory"] == "vssm" and summary["steps"] == 64 and summary["algorithm"] == "sac"
    final = json.loads((out / "summary.json").read_text())["final"]  # every episode of the final evaluation kept
    assert set(final) == {"ood"} and final["ood"]["episodes"] == len(final["ood"]["returns"]) >= 6
    assert final["ood"]["return_mean"] == pytest.approx(sum(final["ood"]["returns"]) / len(final["ood"]["returns"]))
    assert len(final["ood"]["lengths"]) == len(final["ood"]["infos"]) == final["ood"]["episodes"]
    assert set(summary["eval"]) == {"in_dist", "ood"} and 0.0 <= summary["eval"]["ood"]["win"] <= 1.0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["steps"] for r in records] == [32, 64] and all(set(r["eval"]) == {"in_dist", "ood"} for r in records)
    assert (out / "best.pt").is_file() and (out / "last.pt").is_file()
    result = main(["rl-eval", str(out / "last.pt"), "--episodes", "8", "--eval_set", "ood", "--deterministic", "true"])
    assert result["algorithm"] == "sac" and result["eval_set"] == "ood" and result["episodes"] == 8
    assert 0.0 <= result["win"] <= 1.0 and result["train_steps"] == 64


@pytest.mark.gpu
def test_ppo_and_sac_update_on_cuda_and_evaluate_there(tmp_path):
    ppo = main(["rl", "--config", "rl/repeat_first_easy/s5", *TINY_PPO, "--device", "cuda",
                "--out_dir", str(tmp_path / "ppo")])
    assert ppo["device"] == "cuda:0" and ppo["steps"] == 512
    result = main(["rl-eval", str(tmp_path / "ppo" / "last.pt"), "--episodes", "4", "--device", "cuda"])
    assert result["episodes"] == 4
    sac = main(["rl", "--config", "rl/sac/best_arm/kalman", "--agent.encoder.d_model", "8",
                "--agent.encoder.d_state", "8", "--agent.actor", "[16]", "--agent.critic", "[16]", "--env.kwargs",
                "{cost: 0.1, max_steps: 20}", "--sac.total_steps", "64", "--sac.num_envs", "4", "--sac.batch_size", "4",
                "--sac.context", "8", "--sac.learning_starts", "16", "--device", "cuda",
                "--out_dir", str(tmp_path / "sac")])
    assert sac["device"] == "cuda:0" and sac["steps"] == 64
