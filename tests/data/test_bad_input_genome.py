"""Bad genomes for the species reader: empty, short, truncated .gz, not UTF-8, malformed FASTA, stale index; a
folder of real genomes lacking a species that generate: true would fill with synthetic ones. Each must stop with one
clear error naming the file and what to do, and leave no file behind."""

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

from seqssm.data import DataFormatError, DataNotFoundError, SPECIES_SPLITS, SpeciesDataModule
from seqssm.data.generators.genome import SYNTHETIC_MARKER
from seqssm.data.species import find_chromosome

RECIPES = Path(__file__).resolve().parents[2] / "seqssm" / "recipes"


def write_species(root, length=200, species="human"):
    """Every chromosome of `species` as a valid FASTA of `length` bases."""
    (root / species).mkdir(parents=True, exist_ok=True)
    seq = "".join(np.random.default_rng(0).choice(list("ACGT"), length))
    for part in ("train", "valid", "test"):
        for c in SPECIES_SPLITS[species][part]:
            (root / species / f"chr{c}.fna").write_text(f">chr{c}\n{seq}\n")
    return root / species


def setup(root, **kw):
    kw = {"species": ("human",), "max_length": 50, "train_size": 8, "val_size": 4, "test_size": 4, **kw}
    dm = SpeciesDataModule(data_dir=root, **kw)
    dm.setup()
    return dm


def leftovers(folder):
    """Files a failed run left behind: temporaries and partial indexes."""
    return sorted(p.name for p in folder.iterdir() if ".tmp" in p.name or p.suffix == ".fai" and p.stat().st_size == 0)


@pytest.mark.parametrize("content, what", [(b"", "empty file"), (b">chr5\n", "no bases"),
                                           (b">chr5\n\n\n", "cannot index this FASTA file \\(blank lines")])
def test_empty_chromosome_is_refused(tmp_path, content, what):
    folder = write_species(tmp_path)
    (folder / "chr5.fna").write_bytes(content)
    with pytest.raises(DataFormatError, match=rf"chr5\.fna: .*{what}") as e:
        setup(tmp_path)
    assert "download" in str(e.value)


def test_chromosome_shorter_than_a_window_is_refused(tmp_path):
    folder = write_species(tmp_path, length=200)
    (folder / "chr7.fna").write_text(">chr7\n" + "ACGT" * 10 + "\n")
    with pytest.raises(DataFormatError, match=r"chr7\.fna: 40 bases, fewer than one window \(max_length=50\)"):
        setup(tmp_path)
    setup(tmp_path, max_length=40)  # a window that fits is fine


def test_finetune_region_shorter_than_a_window_is_refused(tmp_path):
    write_species(tmp_path, length=200)
    with pytest.raises(DataFormatError, match=r"finetune_bases=30 is shorter than one window \(max_length=50\)"):
        setup(tmp_path, train_subset="finetune", finetune_bases=30)


def test_generated_genome_shorter_than_a_window_names_generate_length(tmp_path):
    with pytest.raises(DataFormatError, match=r"fewer than one window \(max_length=64\).*generate_length"):
        setup(tmp_path, generate=True, generate_length=32, max_length=64)


def test_truncated_gzip_is_refused_and_leaves_nothing(tmp_path):
    folder = write_species(tmp_path)
    (folder / "chr4.fna").unlink()
    seq = np.random.default_rng(1).choice(list(b"ACGT"), 20_000).astype(np.uint8).tobytes()
    blob = gzip.compress(b">chr4\n" + seq + b"\n")
    (folder / "chr4.fna.gz").write_bytes(blob[: len(blob) // 2])
    before = sorted(p.name for p in folder.iterdir())
    for _ in range(2):  # every try: the same message, nothing left behind (but the indexes of the good files)
        with pytest.raises(DataFormatError, match=r"chr4\.fna\.gz: truncated or corrupt gzip .*download it again"):
            setup(tmp_path)
        assert sorted(p.name for p in folder.iterdir() if p.suffix != ".fai") == before


def test_garbage_gzip_is_refused(tmp_path):
    folder = write_species(tmp_path)
    (folder / "chr4.fna").unlink()
    (folder / "chr4.fna.gz").write_bytes(b"<html>404 Not Found</html>")
    with pytest.raises(DataFormatError, match=r"chr4\.fna\.gz: truncated or corrupt gzip"):
        find_chromosome(folder, "4")
    assert not (folder / "chr4.fna").exists() and leftovers(folder) == []


def test_gunzip_interrupted_leaves_no_temporary(tmp_path, monkeypatch):
    """Ctrl-C (or a full disk) in the middle of unzipping: the temporary goes, the error propagates."""
    import shutil

    folder = write_species(tmp_path)
    (folder / "chr4.fna").unlink()
    (folder / "chr4.fna.gz").write_bytes(gzip.compress(b">chr4\nACGT\n"))

    def interrupted(src, dst, length=0):
        dst.write(b">chr4\nAC")
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "copyfileobj", interrupted)
    with pytest.raises(KeyboardInterrupt):
        find_chromosome(folder, "4")
    assert not (folder / "chr4.fna").exists() and leftovers(folder) == []


def test_non_utf8_fasta_names_line_and_offset(tmp_path):
    folder = write_species(tmp_path)
    (folder / "chr9.fna").write_bytes(b">chr9\nACGT\nAC\xe9T\n")
    with pytest.raises(DataFormatError, match=r"chr9\.fna: not UTF-8 text: line 3 \(byte offset 13\) holds byte 0xe9"):
        setup(tmp_path)


def test_inconsistent_line_lengths_name_the_file_and_the_fix(tmp_path):
    folder = write_species(tmp_path)
    (folder / "chr10.fna").write_text(">chr10\n" + "ACGT" * 20 + "\nAC\n" + "ACGT" * 20 + "\n")
    with pytest.raises(DataFormatError, match=r"chr10\.fna: cannot index this FASTA file.*line.*re-wrap") as e:
        setup(tmp_path)
    assert "seqkit seq -w 80" in str(e.value)
    assert not (folder / "chr10.fna.fai").exists()


def test_text_before_the_first_header_is_refused(tmp_path):
    folder = write_species(tmp_path)
    (folder / "chr11.fna").write_text("ACGT" * 20 + "\n")
    with pytest.raises(DataFormatError, match=r"chr11\.fna: cannot index this FASTA file.*'>'"):
        setup(tmp_path)


@pytest.mark.parametrize("index", ["garbage without tabs\n", ""])
def test_stale_garbage_index_is_reported(tmp_path, index):
    folder = write_species(tmp_path)
    fai = folder / "chr12.fna.fai"
    fai.write_text(index)
    os.utime(fai, (os.path.getmtime(folder / "chr12.fna") + 10,) * 2)  # newer than the FASTA: pyfaidx trusts it
    with pytest.raises(DataFormatError, match=r"chr12\.fna: its index .*unreadable or empty.*delete .*chr12\.fna\.fai"):
        setup(tmp_path)


@pytest.mark.parametrize("option, value, message", [("max_length", 0, "max_length must be an integer >= 1"),
                                                    ("max_length", None, "max_length .* must be given"),
                                                    ("train_size", 0, "train_size must be an integer >= 1"),
                                                    ("val_size", -2, "val_size must be an integer >= 1")])
def test_bad_window_options(option, value, message):
    with pytest.raises(ValueError, match=message):
        SpeciesDataModule(**{option: value})


def test_generate_writes_no_synthetic_genome_into_a_folder_of_real_ones(tmp_path, capsys, monkeypatch):
    # Before: synthetic pig/chr*.fna written beside the real human/, and trained on, exit 0
    human = write_species(tmp_path / "real")
    before = {p.name: p.read_bytes() for p in human.iterdir()}
    with pytest.raises(DataNotFoundError) as e:
        setup(tmp_path / "real", species=("human", "pig"), generate=True)
    assert str(e.value).startswith(f"{tmp_path / 'real'} has no pig/ and holds other data (human), so generate: true "
                                   "writes no synthetic genomes there")
    assert f"Put the chromosome files (chr<C>.fna) of pig in {tmp_path / 'real' / 'pig'}" in str(e.value)
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["human"]
    assert {p.name: p.read_bytes() for p in human.iterdir()} == before
    # the quickstart's path: `seqssm fit` says it in one line, exit code 2
    from seqssm.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(RECIPES / "quickstart.yaml"), "--data.init_args.data_dir", "real",
              "--data.init_args.species", "[human, pig]", "--trainer.default_root_dir", "run"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("seqssm fit: error: real has no pig/ and holds other data")
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "real" / "pig").exists()


def test_generate_adds_species_to_an_empty_or_generated_folder(tmp_path):
    setup(tmp_path / "gen", species=("human",), generate=True, generate_length=100)  # missing: made and marked
    assert json.loads((tmp_path / "gen" / SYNTHETIC_MARKER).read_text())["species"] == ["human"]
    setup(tmp_path / "gen", species=("human", "pig"), generate=True, generate_length=100)  # generated: extended
    assert json.loads((tmp_path / "gen" / SYNTHETIC_MARKER).read_text())["species"] == ["human", "pig"]
    (tmp_path / "empty" / ".cache").mkdir(parents=True)  # hidden entries do not count
    setup(tmp_path / "empty", species=("mouse",), generate=True, generate_length=100)
    assert (tmp_path / "empty" / "mouse" / "chr2.fna").is_file()
