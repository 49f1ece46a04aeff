"""`seqssm.errors`, the one home of the user-facing errors: every error class of the package is there, each is a
SeqssmError that keeps the built-in base its callers catch; checkpoints are read safely with errors naming the
file (`load_torch_file`); jsonargparse's reports become one line (`seqssm.arguments`)."""

from __future__ import annotations

import ast
import os
import pickle
from pathlib import Path

import pytest
import torch

import seqssm
from seqssm import errors
from seqssm.arguments import nested_report, type_name
from seqssm.models.safe_load import load_torch_file

PACKAGE = Path(seqssm.__file__).parent


def test_every_error_class_of_the_package_lives_in_seqssm_errors():
    elsewhere = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and (node.name.endswith("Error") or node.name.endswith("Interrupted")):
                elsewhere.append(f"{path.relative_to(PACKAGE.parent)}: class {node.name}")
    assert not elsewhere, "define user-facing errors in seqssm/errors.py:\n" + "\n".join(elsewhere)


def test_seqssm_errors_imports_nothing_of_the_package():
    tree = ast.parse((PACKAGE / "errors.py").read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m and m.split(".")[0] == "seqssm"]


@pytest.mark.parametrize("cls, builtin", [
    (errors.ConfigError, ValueError), (errors.RecipeError, ValueError), (errors.MissingExtraError, ImportError),
    (errors.MissingFileError, FileNotFoundError), (errors.OutputExistsError, FileExistsError),
    (errors.CheckpointError, ValueError), (errors.UnsafeCheckpointError, pickle.UnpicklingError),
    (errors.PretrainedFormatError, ValueError), (errors.NotASeqssmFolderError, ValueError),
    (errors.DataFormatError, ValueError), (errors.CorruptFileError, errors.DataFormatError),
    (errors.DataNotFoundError, FileNotFoundError), (errors.DownloadError, RuntimeError),
    (errors.DigestMismatchError, errors.DownloadError), (errors.UnsafePickleError, pickle.UnpicklingError),
    (errors.InputShapeError, ValueError), (errors.InputDtypeError, TypeError), (errors.SurgeryError, ValueError),
    (errors.IncompatibleWeightsError, RuntimeError), (errors.NonFiniteLossError, FloatingPointError),
    (errors.StudyError, ValueError), (errors.ReproduceError, ValueError), (errors.UsageError, errors.SeqssmError),
])
def test_each_error_is_a_seqssm_error_and_keeps_its_builtin_base(cls, builtin):
    assert issubclass(cls, errors.SeqssmError) and issubclass(cls, builtin)


def test_old_import_locations_name_the_same_classes():
    from seqssm.data import DataFormatError
    from seqssm.models.interop import PretrainedFormatError
    from seqssm.tasks import ConfigError as TaskConfigError
    from seqssm.tasks import TrainingInterrupted

    assert DataFormatError is errors.DataFormatError and PretrainedFormatError is errors.PretrainedFormatError
    assert TaskConfigError is errors.ConfigError
    assert TrainingInterrupted is errors.TrainingInterrupted and not issubclass(TrainingInterrupted, errors.SeqssmError)


def test_old_import_locations_of_the_rl_errors_name_the_same_classes():
    pytest.importorskip("gymnasium", reason="seqssm.rl needs the rl extra: pip install 'seqssm[rl]'")
    from seqssm.rl import CheckpointError, ConfigError

    assert ConfigError is errors.ConfigError and CheckpointError is errors.CheckpointError


def test_wrong_shapes_name_the_expected_and_the_given_shape():
    from seqssm.layers.s4d import S4D
    from seqssm.ops import causal_conv1d

    with pytest.raises(errors.InputShapeError, match=r"x must be \(batch, L, d_model\) = \(batch, L, 4\), "
                                                     r"got \(2, 5, 3\)"):
        S4D(d_model=4)(torch.zeros(2, 5, 3))
    with pytest.raises(errors.InputShapeError, match=r"need x \(batch, dim, L\) and weight \(dim, K\); "
                                                     r"got \(2, 4, 5\) and \(3, 4\)"):
        causal_conv1d(torch.zeros(2, 4, 5), torch.zeros(3, 4))


class Payload:
    """Unpickling this runs os.system: a checkpoint must never be loaded in a way that does."""

    def __reduce__(self):
        return os.system, (f"touch {os.environ['PAYLOAD_MARK']}",)


def test_load_torch_file_names_what_is_wrong_and_never_runs_a_payload(tmp_path, monkeypatch):
    torch.save({"w": torch.ones(2)}, tmp_path / "whole.pt")
    assert torch.equal(load_torch_file(tmp_path / "whole.pt")["w"], torch.ones(2))
    with pytest.raises(errors.MissingFileError, match="missing.pt: no such file"):
        load_torch_file(tmp_path / "missing.pt")
    (tmp_path / "cut.pt").write_bytes((tmp_path / "whole.pt").read_bytes()[:300])
    (tmp_path / "text.pt").write_text("not a checkpoint")
    for name in ("cut.pt", "text.pt"):
        with pytest.raises(errors.CheckpointError, match=f"{name}: unreadable: truncated, or not a file that torch"):
            load_torch_file(tmp_path / name)
    monkeypatch.setenv("PAYLOAD_MARK", str(tmp_path / "payload-ran"))
    torch.save({"w": torch.ones(2), "x": Payload()}, tmp_path / "evil.pt")
    with pytest.raises(errors.UnsafeCheckpointError) as info:
        load_torch_file(tmp_path / "evil.pt")
    assert "evil.pt: refused: it holds Python objects" in str(info.value) and "weights_only" not in str(info.value)
    assert not (tmp_path / "payload-ran").exists()


@pytest.mark.parametrize("report, line", [
    ('Parser key "algorithm":\n  Expected a typing.Literal[\'ppo\', \'sac\']. Got value: dqn',
     "algorithm = 'dqn': expected one of 'ppo', 'sac'"),
    ('Parser key "trainer.max_epochs":\n  Does not validate against any of the Union subtypes\n  Subtypes: '
     "[<class 'int'>, <class 'NoneType'>]\n  Errors:\n    - Expected a <class 'int'>\n    - Expected a <class "
     "'NoneType'>\n  Given value type: <class 'str'>\n  Given value: x",
     "trainer.max_epochs = 'x': expected int or None"),
    ('Parser key "model":\n  Does not validate against any of the Union subtypes\n  Errors:\n    - Problem with '
     "given class_path 'seqssm.tasks.Classification':\n        Option 'warmup' is not accepted\n    - Expected a "
     "<class 'NoneType'>", "unknown option 'model.init_args.warmup'; did you mean 'model.init_args.warmup_steps'?"),
])
def test_jsonargparse_reports_become_one_line(report, line):
    assert nested_report(report, parser=None) == line


def test_type_names_read_like_python():
    assert type_name("<class 'pathlib.Path'>") == "Path" and type_name("<class 'NoneType'>") == "None"
