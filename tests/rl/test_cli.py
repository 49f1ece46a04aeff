import pytest

pytest.importorskip("gymnasium", reason="the rl extra is in the test extra")

from seqssm.rl import cli  # noqa: E402
from seqssm.rl.sac_cli import sac_requested  # noqa: E402


def test_rl_command_routes_sac_recipes_to_sac(monkeypatch):
    called = {}
    monkeypatch.setattr("seqssm.rl.sac_cli.main", lambda argv: called.setdefault("sac", argv))
    monkeypatch.setattr(cli, "rl_main", lambda argv: called.setdefault("ppo", argv))
    cli.main(["rl", "--config", "recipes/rl/sac/memory_length/s5.yaml"])
    cli.main(["rl", "--config", "recipes/rl/repeat_first_easy/s5.yaml"])
    assert called == {"sac": ["--config", "recipes/rl/sac/memory_length/s5.yaml"],
                      "ppo": ["--config", "recipes/rl/repeat_first_easy/s5.yaml"]}
    assert sac_requested(["--algorithm", "sac"]) and not sac_requested(["--algorithm", "ppo"])
