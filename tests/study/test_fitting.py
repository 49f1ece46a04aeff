"""The run records the species study and the reproductions share (seqssm.study.fitting): a finished run is found by
its config, another config is refused naming what differs, an interrupted attempt is said to start over, and a
record is written whole or not at all."""

import pytest

from seqssm.errors import ReproduceError, StudyError
from seqssm.study import fitting


def test_a_record_is_found_by_its_config_and_another_config_is_refused(tmp_path):
    assert fitting.finished_record(tmp_path, {"a": 1}, StudyError) is None
    fitting.write_record(tmp_path, {"config": {"a": 1, "b": (2, 3)}, "final": 0.5})
    # compared as JSON gives it back: the tuple written is the list read
    assert fitting.finished_record(tmp_path, {"a": 1, "b": (2, 3)}, StudyError)["final"] == 0.5
    with pytest.raises(ReproduceError, match=r"other settings \(a: 1 -> 2\); use another --out, or delete"):
        fitting.finished_record(tmp_path, {"a": 2, "b": [2, 3]}, ReproduceError)
    many = {"a": 1, "b": [2, 3], **{f"k{i}": i for i in range(7)}}
    with pytest.raises(StudyError, match=r"k4: None -> 4; 2 more\)"):
        fitting.finished_record(tmp_path, many, StudyError)


def test_a_record_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    fitting.write_record(tmp_path, {"config": {}, "final": 1.0})

    def full_disk(*args, **kwargs):
        raise OSError("no space left")

    monkeypatch.setattr("os.fsync", full_disk)
    with pytest.raises(OSError):
        fitting.write_record(tmp_path, {"config": {}, "final": 2.0})
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temporary left beside it
    assert "1.0" in (tmp_path / "result.json").read_text()


def test_an_interrupted_attempt_is_said_to_start_over(tmp_path):
    run_dir = tmp_path / "run"
    assert fitting.restart_note(run_dir) == ""  # never started
    run_dir.mkdir()
    assert fitting.restart_note(run_dir) == ""  # created, nothing written
    (run_dir / "run.yaml").write_text("a: 1\n")
    assert fitting.restart_note(run_dir) == " (interrupted before: starting over)"
    fitting.write_record(run_dir, {"config": {"a": 1}})
    assert fitting.restart_note(run_dir) == ""  # finished
