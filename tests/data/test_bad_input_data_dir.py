"""A data_dir that cannot hold a dataset (issue 27): a file, a broken symlink, a symlink loop, or a path through a
file is named for what it is, at construction and when a file under it is missing, instead of "not found" with
advice to prepare into that same path."""

import pytest

from seqssm.data import ListOpsDataModule, SpeciesDataModule
from seqssm.data.cli import main as data_main
from seqssm.data.missing import missing, path_problem
from seqssm.data.prepare import prepare
from seqssm.errors import ConfigError


@pytest.fixture
def odd_paths(tmp_path):
    (tmp_path / "afile").write_text("notes")
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    (tmp_path / "broken").symlink_to(tmp_path / "nowhere")
    (tmp_path / "folder").mkdir()
    return tmp_path


CASES = [("afile", "afile is a file, not a folder"), ("afile/listops", "afile is a file, not a folder"),
         ("loop1", "loop1 is a symlink loop"), ("broken", "broken is a broken symlink: its target .*nowhere")]


@pytest.mark.parametrize("name, what", CASES)
@pytest.mark.parametrize("module", [ListOpsDataModule, SpeciesDataModule])
def test_a_data_dir_that_cannot_be_a_folder_is_named_for_what_it_is(odd_paths, module, name, what):
    with pytest.raises(ConfigError, match=rf"^{module.__name__}: data_dir = '.*{name}' cannot hold the dataset: "
                                          rf".*{what}.*; point data_dir at a folder"):
        module(data_dir=odd_paths / name)
    assert (odd_paths / "afile").read_text() == "notes"


def test_folders_and_paths_yet_to_be_made_are_fine(odd_paths):
    for name in ("folder", "folder/new", "new/deeper"):
        assert path_problem(odd_paths / name, folder=True) is None
        assert ListOpsDataModule(data_dir=odd_paths / name).data_dir == odd_paths / name
    assert path_problem(odd_paths / "afile") is None  # a file where a file is wanted
    assert path_problem(odd_paths / "afile", folder=True) == f"{odd_paths / 'afile'} is a file, not a folder"


def test_a_missing_file_behind_a_file_says_so_and_not_how_to_prepare_there(odd_paths):
    error = missing(odd_paths / "afile" / "basic_train.tsv", "layout", "seqssm data prepare listops --out afile")
    assert str(error) == (f"cannot read {odd_paths / 'afile' / 'basic_train.tsv'}: {odd_paths / 'afile'} is a file, "
                          "not a folder; point data_dir at a folder")
    assert "Dataset file or directory not found" in str(missing(odd_paths / "folder" / "x.tsv", "layout", "cmd"))


@pytest.mark.parametrize("name, what", CASES)
def test_prepare_refuses_an_out_that_cannot_be_a_folder(odd_paths, name, what):
    with pytest.raises(ConfigError, match=rf"^data prepare listops: cannot write into .*{name}: .*{what}"):
        prepare("listops", odd_paths / name, n_train=2, n_val=1, n_test=1, min_length=1, max_length=50)
    assert (odd_paths / "afile").read_text() == "notes"


@pytest.mark.parametrize("command", [["list"], ["download", "listops"], ["prepare", "listops"]])
@pytest.mark.parametrize("name, what", CASES)
def test_seqssm_data_refuses_a_data_dir_that_cannot_be_a_folder(odd_paths, command, name, what):
    # Before: download said "afile/downloads: Not a directory", list showed the datasets under the file as missing
    with pytest.raises(ConfigError, match=rf"^--data-dir .*{name}: .*{what}.*; pass a folder"):
        data_main([*command, "--data-dir", str(odd_paths / name)])
