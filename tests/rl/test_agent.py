"""ActorCritic: evaluate (one scan with resets) equals stepping with resets for every core kind; action
spaces (Box actions clipped to the space); clear errors; cores loaded from supervised checkpoints and
exported folders; agent checkpoints that carry such a core."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from seqssm.models import build
from seqssm.models.hub import save_pretrained
from seqssm.rl import (ActorCritic, AgentConfig, CoreConfig, EnvConfig, RunConfig, build_agent, build_core,
                       load_checkpoint, make_env, save_checkpoint)
from seqssm.testing import assert_close_states

OBS = spaces.Box(-np.inf, np.inf, (5,), np.float32)
CORES = {
    "s5": CoreConfig(layer="s5", d_model=8, d_state=8, n_layers=2),
    "s6": CoreConfig(layer="s6", d_model=8, d_state=4),
    "s4d": CoreConfig(layer="s4d", d_model=8, d_state=4),
    "mingru": CoreConfig(layer="mingru", d_model=8),
    "gru": CoreConfig(layer="gru", d_model=8, n_layers=2),
    "kalman": CoreConfig(layer="kalman", d_model=8, d_state=4, activation="glu"),
    "mamba-s6": CoreConfig(layer="s6", block="mamba", d_model=8, d_state=4, n_layers=2),
    "simple-s4d": CoreConfig(layer="s4d", block="simple", d_model=8, d_state=4),
    "s5-glu-no-norm": CoreConfig(layer="s5", d_model=8, d_state=8, n_layers=2, activation="glu", norm=False),
    "gru-bare": CoreConfig(layer="gru", d_model=8, n_layers=1, block="none"),
    "mlp": CoreConfig(layer="mlp", d_model=8, n_layers=2, block="none"),
}


def small_agent(core, action_space=spaces.Discrete(3), seed=0) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(core, OBS, action_space, encoder=[16], actor=[16], critic=[16]).double()


def perturb(agent: ActorCritic) -> ActorCritic:
    """Move every weight off its init (the actor's last layer starts near zero) so all paths matter."""
    with torch.no_grad():
        for p in agent.parameters():
            p.add_(0.2 * torch.randn_like(p))
        for m in agent.modules():
            if hasattr(m, "log_dt"):
                m.log_dt.uniform_(-3, -0.5)  # steps large enough that the state matters in 14 steps
            if hasattr(m, "dt_raw"):
                m.dt_raw.fill_(-1.0)
    return agent


def episode_starts(batch: int, length: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    dones = torch.rand(batch, length, generator=g) < 0.2
    dones[0, 0], dones[1, 0], dones[2, 5] = True, False, True
    return dones


@pytest.mark.parametrize("name", CORES)
def test_evaluate_equals_stepping_with_resets(name):
    agent = perturb(small_agent(build_core(CORES[name])))
    batch, length = 3, 14
    obs = torch.randn(batch, length, OBS.shape[0], dtype=torch.float64)
    dones = episode_starts(batch, length)
    with torch.no_grad():
        state = agent.initial_state(batch)
        for t in range(4):  # a rollout starts mid-episode: its stored start state is not the initial one
            state = agent.act(torch.randn(batch, OBS.shape[0], dtype=torch.float64), state).state
        start_state, actions, log_probs, values = state, [], [], []
        for t in range(length):
            out = agent.act(obs[:, t], state, dones[:, t])
            actions.append(out.action)
            log_probs.append(out.log_prob)
            values.append(out.value)
            state = out.state
        ev = agent.evaluate(obs, start_state, dones, torch.stack(actions, 1))
    tol = dict(atol=1e-9, rtol=1e-7)
    torch.testing.assert_close(ev.log_prob, torch.stack(log_probs, 1), **tol)
    torch.testing.assert_close(ev.value, torch.stack(values, 1), **tol)
    assert_close_states(ev.state, state, **tol)
    assert ev.entropy.shape == (batch, length) and bool((ev.entropy > 0).all())


def test_reset_forgets_the_past():
    """After a done flag the agent acts exactly as from a fresh state, whatever it saw before."""
    agent = perturb(small_agent(build_core(CORES["s5"])))
    obs = torch.randn(2, OBS.shape[0], dtype=torch.float64)
    with torch.no_grad():
        state = agent.act(torch.randn(2, OBS.shape[0], dtype=torch.float64), agent.initial_state(2)).state
        after_done = agent.act(obs, state, torch.tensor([True, False]))
        fresh = agent.act(obs, agent.initial_state(2))
    torch.testing.assert_close(after_done.value[0], fresh.value[0])
    assert not torch.allclose(after_done.value[1], fresh.value[1])


@pytest.mark.parametrize("space, shape, dtype", [
    (spaces.Discrete(4), (), torch.int64),
    (spaces.MultiDiscrete([3, 5]), (2,), torch.int64),
    (spaces.Box(-2.0, 2.0, (3,), np.float32), (3,), torch.float64),
])
def test_action_spaces(space, shape, dtype):
    agent = small_agent(build_core(CORES["mingru"]), action_space=space)
    obs = torch.randn(6, 7, OBS.shape[0], dtype=torch.float64)
    out = agent.act(obs[:, 0], agent.initial_state(6))
    assert out.action.shape == (6, *shape) and out.action.dtype == dtype
    assert out.log_prob.shape == (6,) and out.value.shape == (6,)
    if dtype == torch.int64:
        assert all(space.contains(a) for a in out.action.numpy().astype(np.int64))
    actions = torch.stack([out.action] * 7, dim=1)
    ev = agent.evaluate(obs, agent.initial_state(6), torch.zeros(6, 7, dtype=torch.bool), actions)
    assert ev.log_prob.shape == ev.entropy.shape == ev.value.shape == (6, 7)
    greedy = agent.act(obs[:, 0], agent.initial_state(6), deterministic=True).action
    assert torch.equal(greedy, agent.act(obs[:, 0], agent.initial_state(6), deterministic=True).action)
    if isinstance(space, spaces.Box):  # the Gaussian samples anywhere; the environment gets actions in its bounds
        clipped = agent.env_action(out.action * 100)
        assert np.abs(clipped).max() == 2.0 and all(space.contains(a.astype(np.float32)) for a in clipped)


def test_bad_spaces_and_cores_are_named():
    core = build_core(CORES["s5"])
    with pytest.raises(ValueError, match=r"unsupported action space Tuple.*Discrete, MultiDiscrete or a 1-d Box"):
        ActorCritic(core, OBS, spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))))
    with pytest.raises(ValueError, match="flat observations.*make_env"):
        ActorCritic(core, spaces.Discrete(4), spaces.Discrete(2))
    with pytest.raises(ValueError, match="unknown sequence layer 'lstm'; registered layers: .*gru.*; or 'mlp'"):
        build_core(CoreConfig(layer="lstm"))
    with pytest.raises(ValueError, match="unknown core block 'lstm'"):
        build_core(CoreConfig(layer="s5", block="lstm"))
    with pytest.raises(ValueError, match="causal"):
        ActorCritic(build("mamba-s6-bi", d_input=3, n_classes=2, d_model=8, n_layers=1), OBS, spaces.Discrete(2))


def test_orthogonal_init_is_the_schema_of_lu_et_al_code():
    """Orthogonal weights (rows or columns orthonormal, times the gain) and zero biases: encoder sqrt(2), heads'
    hidden layers 2, actor output 0.01, critic output 1; a GRU core as flax's GRUCell (orthogonal per gate)."""
    config = AgentConfig(core=CoreConfig(layer="gru", d_model=16, n_layers=1, block="none"), encoder=[8],
                         actor=[12, 12], critic=[12, 12], init="orthogonal")
    agent = build_agent(config, OBS, spaces.Discrete(3))

    def assert_orthogonal(weight, gain):
        w = weight.detach().double() / gain
        small = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
        torch.testing.assert_close(small, torch.eye(small.shape[0], dtype=torch.float64), atol=1e-5, rtol=0)

    linears = lambda m: [x for x in m.modules() if isinstance(x, torch.nn.Linear)]  # noqa: E731
    expected = [(linears(agent.encoder), [2 ** 0.5, 2 ** 0.5]), (linears(agent.actor.net), [2, 2, 0.01]),
                (linears(agent.critic), [2, 2, 1])]
    for layers, gains in expected:
        assert len(layers) == len(gains)
        for layer, gain in zip(layers, gains):
            assert_orthogonal(layer.weight, gain)
            assert not layer.bias.any()
    gru = agent.core.layers[0].gru
    for gate in gru.weight_hh_l0.chunk(3):
        assert_orthogonal(gate, 1.0)
    assert gru.weight_ih_l0.abs().max() <= 2 / 16 ** 0.5 / 0.8796 + 1e-6  # truncated at 2 std
    assert not gru.bias_ih_l0.any() and not gru.bias_hh_l0.any()
    default = build_agent(AgentConfig(core=config.core, encoder=[8]), OBS, spaces.Discrete(3))
    assert default.encoder[0].bias.any()  # torch's init, unchanged
    with pytest.raises(ValueError, match="unknown init 'xavier'; choose one of"):
        build_agent(AgentConfig(core=config.core, init="xavier"), OBS, spaces.Discrete(3))


def _supervised_model():
    torch.manual_seed(1)
    return build("simple-s4d", d_input=3, n_classes=2, d_model=8, n_layers=2, d_state=4)


def _assert_core_is(agent: ActorCritic, model) -> None:
    for key, value in model.backbone.state_dict().items():
        torch.testing.assert_close(agent.core.state_dict()[key], value)


def test_core_init_from_exported_folder_and_agent_checkpoint(tmp_path):
    model = _supervised_model()
    save_pretrained(model, tmp_path / "exported")
    config = AgentConfig(core_init_from=str(tmp_path / "exported"), encoder=[16], actor=[16], critic=[16])
    env = EnvConfig(name="RepeatFirstEasy")
    probe = make_env(env)
    agent = build_agent(config, probe.observation_space, probe.action_space)
    _assert_core_is(agent, model)
    assert agent.d_model == 8

    # The agent checkpoint carries the core's model config: it loads without the exported folder.
    (tmp_path / "exported" / "model.safetensors").unlink()
    save_checkpoint(tmp_path / "agent.pt", agent, RunConfig(env=env, agent=config))
    loaded, loaded_config, ckpt = load_checkpoint(tmp_path / "agent.pt")
    assert loaded_config.env.name == env.name and ckpt["core_model_config"]["d_model"] == 8
    obs = torch.randn(2, probe.observation_space.shape[0])
    agent.eval(), loaded.eval()  # the supervised model's dropout (0.1) is live in train mode
    with torch.no_grad():
        a = agent.act(obs, agent.initial_state(2), deterministic=True)
        b = loaded.act(obs, loaded.initial_state(2), deterministic=True)
    torch.testing.assert_close(a.value, b.value)
    assert torch.equal(a.action, b.action)


def test_core_init_from_lightning_checkpoint(tmp_path):
    from seqssm.tasks.classification import Classification

    task = Classification(model="simple-s4d", model_overrides={"d_model": 8, "n_layers": 2, "d_state": 4},
                          d_input=3, n_classes=2)
    # what LightningCLI writes: the task's hyperparameters with its class path, and the task's state dict
    hparams = {**dict(task.hparams), "_class_path": "seqssm.tasks.classification.Classification"}
    torch.save({"hyper_parameters": hparams, "state_dict": task.state_dict()}, tmp_path / "last.ckpt")
    agent = build_agent(AgentConfig(core_init_from=str(tmp_path / "last.ckpt")), OBS, spaces.Discrete(2))
    _assert_core_is(agent, task.model)
    with pytest.raises(FileNotFoundError, match=r"core_init_from: .*missing\.ckpt: no such file or folder"):
        build_agent(AgentConfig(core_init_from=str(tmp_path / "missing.ckpt")), OBS, spaces.Discrete(2))
