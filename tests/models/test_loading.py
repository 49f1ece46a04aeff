"""seqssm.models.loading: task checkpoints and folders into a SequenceModel, old and new, without the tasks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from seqssm.blocks import SimpleBlockConfig, SSPConfig
from seqssm.models import SequenceModel, SequenceModelConfig, build
from seqssm.models.hub import provenance_record
from seqssm.models.loading import (
    CHECKPOINT_MODEL_CONFIG,
    CHECKPOINT_PROVENANCE,
    model_from_path,
    read_weights,
)

LEGACY = Path(__file__).parents[1] / "fixtures" / "legacy"
LEGACY_CHECKPOINTS = ["ntp.ckpt", "classification.ckpt", "mlm.ckpt"]


@pytest.fixture(scope="module")
def expected():
    """Fixed inputs and the outputs the code that wrote the fixtures computed from each of them."""
    return load_file(str(LEGACY / "expected.safetensors"))


def outputs(model: SequenceModel, expected: dict) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(expected["inputs"], lengths=expected["lengths"])


@pytest.mark.parametrize("name", LEGACY_CHECKPOINTS + ["ntp-folder"])
def test_files_written_before_checkpoints_stored_the_model_config_load_to_the_same_outputs(name, expected):
    model = model_from_path(LEGACY / name)
    torch.testing.assert_close(outputs(model, expected), expected[name], rtol=1e-6, atol=1e-6)



@pytest.mark.parametrize("name", LEGACY_CHECKPOINTS)
def test_from_pretrained_builds_its_own_class_from_a_legacy_checkpoint(name, expected):
    # the reading path sits below SequenceModel and is handed the class; a legacy config comes from the registry
    class Subclass(SequenceModel):
        pass

    model = Subclass.from_pretrained(LEGACY / name)
    assert type(model) is Subclass
    torch.testing.assert_close(outputs(model, expected), expected[name], rtol=1e-6, atol=1e-6)

@pytest.mark.parametrize("name", LEGACY_CHECKPOINTS)
def test_legacy_checkpoint_weights_are_the_stored_tensors(name):
    ckpt = torch.load(LEGACY / name, weights_only=True)
    assert CHECKPOINT_MODEL_CONFIG not in ckpt, "a legacy fixture must exercise the rebuild from hyper-parameters"
    stored = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    model = SequenceModel.from_pretrained(LEGACY / name)
    state, provenance = read_weights(LEGACY / name)
    assert model.state_dict().keys() == stored.keys() == state.keys()
    for key, value in stored.items():
        assert torch.equal(model.state_dict()[key], value) and torch.equal(state[key], value), key
    assert model.provenance == provenance == ckpt[CHECKPOINT_PROVENANCE]


def test_legacy_checkpoints_rebuild_each_task_s_network(expected):
    classifier = SequenceModel.from_pretrained(LEGACY / "classification.ckpt")
    assert classifier.config.n_classes == 2 and classifier.config.pooling == "mean"
    # the classifier started from the exported NTP folder: its lineage survives
    assert classifier.provenance == provenance_record("init_from", init_from=("ntp-folder", None))
    language_model = SequenceModel.from_pretrained(LEGACY / "ntp.ckpt")
    assert language_model.is_lm and language_model.causal
    masked = SequenceModel.from_pretrained(LEGACY / "mlm.ckpt")
    assert masked.is_lm and not masked.causal and masked.config.block.ssp.layer == "s4d"
    assert masked.config.block.expand == 1  # a model_overrides entry
    # the export of the NTP checkpoint holds the same network
    folder = SequenceModel.from_pretrained(LEGACY / "ntp-folder")
    assert folder.config == language_model.config
    assert torch.equal(outputs(folder, expected), outputs(language_model, expected))


def a_checkpoint(model: SequenceModel, **entries) -> dict:
    """What `seqssm fit` saves for a task holding `model` (the state dict under the task's `model.` prefix)."""
    return {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}, **entries}


def test_new_checkpoints_rebuild_from_the_stored_config_alone(tmp_path):
    # a config no registry name with overrides would give back: only the stored config can rebuild it
    model = SequenceModel(SequenceModelConfig(d_model=8, n_layers=2, block=SimpleBlockConfig(SSPConfig("s4d", 4)),
                                              d_input=3, n_classes=4, pooling="last"))
    lineage = provenance_record("init_from", init_from=("somewhere", None))
    stored = {CHECKPOINT_MODEL_CONFIG: model.config.to_dict(), CHECKPOINT_PROVENANCE: lineage}
    torch.save(a_checkpoint(model, **stored),
               tmp_path / "new.ckpt")
    loaded = SequenceModel.from_pretrained(tmp_path / "new.ckpt")
    assert loaded.config == model.config and loaded.provenance == lineage
    x = torch.randn(2, 5, 3)
    with torch.no_grad():
        assert torch.equal(loaded.eval()(x), model.eval()(x))


def test_task_checkpoints_store_the_model_config(tmp_path):
    from seqssm.tasks import Classification

    task = Classification(model="mamba-s6", model_overrides={"d_model": 8, "n_layers": 1, "d_state": 4},
                          vocab_size=12, n_classes=3)
    task.model.provenance = provenance_record("to_bidirectional", causal=("a", None))
    checkpoint = {"state_dict": task.state_dict()}
    task.on_save_checkpoint(checkpoint)
    assert checkpoint[CHECKPOINT_MODEL_CONFIG] == task.model.config.to_dict()
    assert checkpoint[CHECKPOINT_PROVENANCE] == task.model.provenance
    torch.save(checkpoint, tmp_path / "task.ckpt")  # no hyper-parameters: the stored config is enough
    loaded = SequenceModel.from_pretrained(tmp_path / "task.ckpt")
    assert loaded.config == task.model.config and loaded.provenance == task.model.provenance


def test_loading_a_checkpoint_imports_neither_tasks_nor_lightning():
    code = ("import sys; from seqssm.models.loading import model_from_path; "
            f"model_from_path({str(LEGACY / 'classification.ckpt')!r}); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning') "
            "or m.startswith(('seqssm.tasks', 'seqssm.rl', 'seqssm.study', 'seqssm.cli'))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_unreadable_checkpoints_say_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"core_init_from: .*missing\.ckpt: no such file or folder"):
        model_from_path(tmp_path / "missing.ckpt", "core_init_from")
    model = build("mamba-s6", vocab_size=5, d_model=8, n_layers=1)
    torch.save(a_checkpoint(model, hyper_parameters={"lr": 1e-3}), tmp_path / "foreign.ckpt")
    with pytest.raises(ValueError, match=f"foreign.ckpt: not a seqssm task checkpoint.*{CHECKPOINT_MODEL_CONFIG}"):
        SequenceModel.from_pretrained(tmp_path / "foreign.ckpt")
    state, provenance = read_weights(tmp_path / "foreign.ckpt")  # the weights alone need no config
    assert state.keys() == model.state_dict().keys() and provenance is None
    torch.save([1, 2], tmp_path / "list.ckpt")
    with pytest.raises(ValueError, match="list.ckpt holds a list, not a checkpoint dict"):
        read_weights(tmp_path / "list.ckpt")


def test_provenance_is_a_declared_attribute():
    model = build("mamba-s6", vocab_size=5, d_model=8, n_layers=1)
    assert model.provenance is None
