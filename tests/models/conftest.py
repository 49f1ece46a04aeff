"""Fixtures of tests/models: `hub`, a loopback Hugging Face Hub (tests/models/hub_server.py) that huggingface_hub
talks to instead of huggingface.co, with the Hugging Face cache and home in the test's temporary folder."""

from __future__ import annotations

import pytest

from .hub_server import HubServer


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """The stand-in Hub, online; HF_HUB_CACHE is tmp_path / "hf-cache" and no token is sent."""
    from huggingface_hub import constants

    server = HubServer()
    monkeypatch.setattr(constants, "ENDPOINT", server.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(tmp_path / "hf-home" / ".agent_harnesses.json"))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("HF_TOKEN", "test-token")  # never a real one from this machine
    yield server
    server.close()
