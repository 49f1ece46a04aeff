"""Species windows from FASTA: splits, sampling rules, padding, limited finetune, generators."""

import gzip
import warnings

import numpy as np
import pytest
import torch

from seqssm.data import DataNotFoundError, DNATokenizer, SPECIES_SPLITS, SpeciesDataModule
from seqssm.data.generators.genome import write_genomes
from seqssm.data.species import EpochKeySampler

A, C, G, T, N = 7, 8, 9, 10, 11


def test_tokenizer_ids():
    tok = DNATokenizer()
    assert tok.vocab_size == 12 and (tok.pad_token_id, tok.mask_token_id, tok.cls_token_id) == (4, 3, 0)
    ids, bad = tok.encode("ACGTNacgtnRY-")
    assert ids.tolist() == [A, C, G, T, N, A, C, G, T, N, N, N, N] and bad == 3


def test_split_table_is_hyenadna():
    r = lambda a, b: [str(i) for i in range(a, b + 1)]  # noqa: E731
    train = {
        "human": ["2", "4", "6", "8", *r(14, 22), "X", "Y"],
        "lemur": ["2", "4", "6", "8", *r(14, 27), "X", "Y"],
        "pig": ["2", "4", "6", "8", *r(14, 18), "X", "Y"],
        "mouse": ["2", "4", "6", "8", *r(14, 19), "X"],
        "hippo": ["2", "4", "6", "8", *r(14, 17), "X"],
    }
    for sp, chroms in train.items():
        assert SPECIES_SPLITS[sp] == {"train": chroms, "valid": ["1", "3", "12", "13"], "test": ["5", "7", "9", "10", "11"]}


def write_marked(root, species=("human", "mouse"), length=400):
    """Train chromosomes all A, validation all C, test all G: any leak shows in the tokens."""
    fill = {"train": "A", "valid": "C", "test": "G"}
    for sp in species:
        (root / sp).mkdir(parents=True)
        for part, base in fill.items():
            for c in SPECIES_SPLITS[sp][part]:
                (root / sp / f"chr{c}.fa").write_text(f">chr{c}\n" + "\n".join([base * 60] * (length // 60)) + "\n")


def dm_for(root, **kw):
    kw = {"species": ("human", "mouse"), "max_length": 50, "batch_size": 16, "train_size": 64, "val_size": 32,
          "test_size": 32, **kw}
    dm = SpeciesDataModule(data_dir=root, **kw)
    dm.setup()
    return dm


def tokens_of(loader):
    return torch.cat([b["inputs"].flatten() for b in loader]).unique().tolist()


@pytest.mark.parametrize("sampling", ["hyenadna", "thesis"])
def test_no_validation_or_test_chromosome_in_training(tmp_path, sampling):
    write_marked(tmp_path)
    dm = dm_for(tmp_path, sampling=sampling)
    assert set(tokens_of(dm.train_dataloader())) <= {A, N}
    assert set(tokens_of(dm.val_dataloader())) <= {C, N}
    assert set(tokens_of(dm.test_dataloader())) <= {G, N}
    for sp, names in dm.chromosomes("train").items():
        assert not set(names) & set(SPECIES_SPLITS[sp]["valid"] + SPECIES_SPLITS[sp]["test"])


def test_batches_classification(tmp_path):
    write_marked(tmp_path)
    dm = dm_for(tmp_path)
    assert (dm.vocab_size, dm.n_classes, dm.pad_token_id, dm.mask_token_id, dm.d_input) == (12, 2, 4, 3, None)
    b = next(iter(dm.train_dataloader()))
    assert b["inputs"].shape == (16, 50) and b["lengths"].eq(50).all()
    assert set(b["labels"].tolist()) <= {0, 1} and len(set(b["labels"].tolist())) == 2


def reference_chrom(root, n=300):
    """One species whose chromosomes are a known random sequence, to compare windows against."""
    seq = "".join(np.random.default_rng(0).choice(list("ACGT"), size=n))
    write = lambda c: (root / "human" / f"chr{c}.fna").write_text(f">chr{c}\n{seq}\n")  # noqa: E731
    (root / "human").mkdir(parents=True)
    for part in ("train", "valid", "test"):
        for c in SPECIES_SPLITS["human"][part]:
            write(c)
    return DNATokenizer().encode(seq)[0]


def test_hyenadna_window_rule(tmp_path):
    ref = reference_chrom(tmp_path)
    L = 40
    dm = dm_for(tmp_path, species=("human",), max_length=L, train_size=400)
    ds = dm.splits["train"]
    padded = 0
    for key in range(400):
        _, region, start, end = ds.sample(key)
        assert 0 <= start <= 300 - L and end == min(start + L, 300 - L)
        ids, label = ds[key]
        assert len(ids) == L and label == 0
        k = L - (end - start)
        assert np.all(ids[:k] == N) and np.array_equal(ids[k:], ref[start:end])  # left padding with N
        padded += k > 0
    assert padded > 0  # HyenaDNA's truncation near the end does happen


def test_thesis_window_rule_pads_past_the_end(tmp_path):
    ref = reference_chrom(tmp_path)
    L = 40
    for end_token in ("N", "pad"):
        dm = dm_for(tmp_path, species=("human",), max_length=L, sampling="thesis", end_token=end_token,
                    train_size=300, batch_size=300)
        ds = dm.splits["train"]
        starts = [ds.sample(k)[2] for k in range(300)]
        assert max(starts) > 300 - L  # starts range over the whole chromosome
        b = next(iter(dm.train_dataloader()))
        assert b["inputs"].shape == (300, L)
        for row, n, key in zip(b["inputs"].numpy(), b["lengths"].tolist(), range(300)):
            start = ds.sample(key)[2]
            real = min(L, 300 - start)
            assert np.array_equal(row[:real], ref[start : start + real])
            if end_token == "N":
                assert n == L and np.all(row[real:] == N)
            else:
                assert n == real and np.all(row[real:] == 4)  # [PAD], masked by lengths


def test_window_of_the_whole_chromosome_and_reverse(tmp_path):
    ref = reference_chrom(tmp_path, n=30)
    dm = dm_for(tmp_path, species=("human",), max_length=30)  # (shorter chromosomes are refused: test_bad_input_genome)
    ids, _ = dm.splits["val"][0]
    assert np.array_equal(ids, ref)
    fwd = dm_for(tmp_path, species=("human",), max_length=20, sampling="thesis")
    rev = dm_for(tmp_path, species=("human",), max_length=20, sampling="thesis", reverse=True)
    for key in range(10):
        assert np.array_equal(rev.splits["val"][key][0], fwd.splits["val"][key][0][::-1])


def test_limited_finetune_split_is_disjoint(tmp_path):
    write_genomes(tmp_path, ("human", "mouse"), chrom_length=2000, order=2, seed=0)
    kw = {"max_length": 64, "train_size": 500, "finetune_bases": 300}
    ft = dm_for(tmp_path, train_subset="finetune", **kw)
    pre = dm_for(tmp_path, train_subset="pretrain", task="ntp", **kw)
    full = dm_for(tmp_path, **kw)
    for sp in ("human", "mouse"):
        assert ft.chromosomes("train")[sp] == ["2"]
        assert "2" not in pre.chromosomes("train")[sp]
        assert sorted(pre.chromosomes("train")[sp] + ["2"]) == sorted(full.chromosomes("train")[sp])
        for split in ("val", "test"):
            assert ft.chromosomes(split)[sp] == pre.chromosomes(split)[sp] == full.chromosomes(split)[sp]
    ds = ft.splits["train"]
    for key in range(500):
        _, region, start, end = ds.sample(key)
        assert region.chrom.name == "2" and end <= 300
    assert {ds.sample(k)[1].chrom.name for k in range(200)} == {"2"}
    assert "2" not in {pre.splits["train"].sample(k)[1].chrom.name for k in range(500)}
    assert pre.n_classes is None and "labels" not in next(iter(pre.train_dataloader()))


def test_limited_finetune_takes_each_species_smallest_training_chromosome(tmp_path):
    # Ulbaek 2024 thesis, 16.6, finetunes on one chromosome per species; the authors' code took the smallest
    # training one
    sizes = {"human": {"21": 240, "Y": 300}, "mouse": {"X": 180, "19": 180}}  # mouse: a tie, the split's first wins
    for sp in ("human", "mouse"):
        (tmp_path / sp).mkdir()
        for part in ("train", "valid", "test"):
            for c in SPECIES_SPLITS[sp][part]:
                n = sizes[sp].get(c, 420)
                (tmp_path / sp / f"chr{c}.fa").write_text(f">chr{c}\n" + "\n".join(["ACGT" * 15] * (n // 60)) + "\n")
    kw = {"max_length": 64, "finetune_bases": 100}
    ft, pre = dm_for(tmp_path, train_subset="finetune", **kw), dm_for(tmp_path, train_subset="pretrain", **kw)
    assert ft.chromosomes("train") == {"human": ["21"], "mouse": ["19"]}
    chosen = {sp: names[0] for sp, names in ft.chromosomes("train").items()}
    assert pre.chromosomes("train") == {sp: [c for c in SPECIES_SPLITS[sp]["train"] if c != chosen[sp]]
                                        for sp in ("human", "mouse")}
    assert {ft.splits["train"].sample(k)[1].chrom.name for k in range(100)} == {"21", "19"}
    # the earlier fixed choice, and an explicit one
    first = dm_for(tmp_path, train_subset="finetune", finetune_chromosomes="first", **kw)
    assert first.chromosomes("train") == {"human": ["2"], "mouse": ["2"]}
    chosen = dm_for(tmp_path, train_subset="finetune", finetune_chromosomes={"human": "Y"}, **kw)
    assert chosen.chromosomes("train") == {"human": ["Y"], "mouse": ["19"]}
    with pytest.raises(ValueError, match="not a training chromosome"):
        SpeciesDataModule(data_dir=tmp_path, species=("human",), finetune_chromosomes={"human": "1"})
    with pytest.raises(ValueError, match="not one of species"):
        SpeciesDataModule(data_dir=tmp_path, species=("human",), finetune_chromosomes={"pig": "18"})
    with pytest.raises(ValueError, match="finetune_chromosomes must be one of"):
        SpeciesDataModule(data_dir=tmp_path, species=("human",), finetune_chromosomes="largest")


def test_mlm_no_labels_and_epochs(tmp_path):
    write_genomes(tmp_path, ("human", "pig"), chrom_length=3000, order=2, seed=1)
    dm = dm_for(tmp_path, species=("human", "pig"), task="mlm", max_length=32)
    assert dm.n_classes is None and dm.mask_token_id == 3
    loader = dm.train_dataloader()
    first = next(iter(loader))
    assert set(first) == {"inputs", "lengths"}
    assert torch.equal(next(iter(loader))["inputs"], first["inputs"])  # same epoch, same windows
    loader.sampler.set_epoch(1)
    assert not torch.equal(next(iter(loader))["inputs"], first["inputs"])  # new epoch, new windows
    v1, v2 = next(iter(dm.val_dataloader())), next(iter(dm.val_dataloader()))
    assert torch.equal(v1["inputs"], v2["inputs"])
    assert isinstance(loader.sampler, EpochKeySampler)


def test_non_acgtn_become_n_with_counted_warning(tmp_path):
    reference_chrom(tmp_path, n=60)
    for c in SPECIES_SPLITS["human"]["valid"]:
        (tmp_path / "human" / f"chr{c}.fna").write_text(f">chr{c}\n" + "ACGTRYKM" * 5 + "\n")
    dm = dm_for(tmp_path, species=("human",), max_length=40)
    ds = dm.splits["val"]
    with pytest.warns(UserWarning, match=r"chr\d+.fna: 20 non-ACGTN"):
        ids, _ = ds[0]
    assert ids.tolist() == [A, C, G, T, N, N, N, N] * 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds[0]  # counted, not repeated
    assert sum(ds.replaced.values()) == 40


def test_gz_and_missing(tmp_path):
    reference_chrom(tmp_path, n=50)
    p = tmp_path / "human" / "chr5.fna"
    with gzip.open(str(p) + ".gz", "wb") as f:
        f.write(b">chr5\n" + b"G" * 50 + b"\n")
    p.unlink()
    dm = dm_for(tmp_path, species=("human",), max_length=20)
    assert p.exists() and set(tokens_of(dm.test_dataloader())) >= {G}
    (tmp_path / "human" / "chr13.fna").unlink()
    with pytest.raises(DataNotFoundError, match=r"chr13.fna(.|\n)*seqssm data prepare species --species human"):
        dm_for(tmp_path, species=("human",))
    with pytest.raises(ValueError, match="unknown species"):
        SpeciesDataModule(species=("dragon",))


def test_genome_generator(tmp_path):
    write_genomes(tmp_path / "a", ("human", "hippo"), chrom_length=5000, order=3, seed=4)
    write_genomes(tmp_path / "b", ("hippo",), chrom_length=5000, order=3, seed=4)
    hippo = (tmp_path / "a" / "hippo" / "chr2.fna").read_bytes()
    assert hippo == (tmp_path / "b" / "hippo" / "chr2.fna").read_bytes()  # deterministic, per species
    files = sorted(p.name for p in (tmp_path / "a" / "hippo").iterdir())
    assert len(files) == 18 and "chrX.fna" in files

    def kmer_freq(path):
        seq = "".join(path.read_text().splitlines()[1:])
        assert len(seq) == 5000 and set(seq) <= set("ACGT")
        ids = np.array(["ACGT".index(c) for c in seq])
        return np.bincount(ids[:-1] * 4 + ids[1:], minlength=16) / (len(ids) - 1)

    h, p = kmer_freq(tmp_path / "a" / "human" / "chr2.fna"), kmer_freq(tmp_path / "a" / "hippo" / "chr2.fna")
    h2 = kmer_freq(tmp_path / "a" / "human" / "chr1.fna")
    assert np.abs(h - p).sum() > 3 * np.abs(h - h2).sum()  # species differ far more than chromosomes


def test_generate_true_builds_species(tmp_path):
    dm = SpeciesDataModule(data_dir=tmp_path, generate=True, generate_length=3000, max_length=128, batch_size=8,
                           train_size=16, val_size=8, test_size=8)
    dm.setup()
    b = next(iter(dm.train_dataloader()))
    assert b["inputs"].shape == (8, 128) and dm.n_classes == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == [".seqssm-synthetic.json", "hippo", "human", "lemur", "mouse",
                                                          "pig"]
