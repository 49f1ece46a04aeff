"""The dataset registry: per dataset its DataModule, published files, digests, unpacking and offline generator.

One table, `DATASETS`, read by `seqssm data list | download | prepare` (the names they accept, the
generator options `prepare` takes) and by the DataModules' "file not found" messages. A new dataset
is its DataModule's module plus one `Dataset` entry here. Facts and where they were read:

- LRA release `lra_release.gz` (a gzipped tar): the URL in google-research/long-range-arena's
  README; the member layout `lra_release/lra_release/{listops-1000, tsv_data, pathfinder*}` from
  the S4 repository's data README (state-spaces/s4, src/dataloaders/README.md), which moves
  exactly those folders into `listops/`, `aan/` and `pathfinder/`. No digest is published.
- `aclImdb_v1.tar.gz`: URL and md5 from torchtext's IMDB dataset (pytorch/text); size as served.
- `cifar-10-python.tar.gz`: URL and md5 from torchvision's CIFAR10 class (pytorch/vision).
- MNIST IDX files: names, md5s and both mirrors from torchvision's MNIST class, the S3 mirror
  first because yann.lecun.com answers 403 to scripts.
- Species genomes: the five NCBI assemblies HyenaDNA's README downloads for its species
  classification (HazyResearch/hyena-dna, "Species Classification"), one `chr<C>.fna.gz` per
  chromosome from each assembly's `Primary_Assembly/assembled_chromosomes/FASTA/` folder, for
  the chromosomes of HyenaDNA's splits. The stable `genomes/all/GCA/...` path comes first; the
  README's `latest_assembly_versions` path (the same files while no newer version exists) second.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .species_splits import DEFAULT_SPECIES, SPECIES_SPLITS


@dataclass(frozen=True)
class SourceFile:
    """One published file: `name` is its path under `<data-dir>/downloads/` and under a mirror."""

    name: str
    urls: tuple[str, ...]
    md5: str | None = None  # published digest, checked after download
    size: int | None = None  # bytes, where known (shown by `seqssm data list`)


@dataclass(frozen=True)
class Option:
    """A generator option: `seqssm data prepare --<name, dashes for underscores>`, the generator's `keyword`."""

    name: str
    default: int | str | tuple[str, ...]  # also the option's type: an int, a string or several strings
    help: str = ""
    keyword: str = ""  # the generator's parameter, where its name is not `name`
    count: bool = False  # counts something (examples, tokens, pixels, bases): refused unless an integer >= 1


@dataclass(frozen=True)
class Generator:
    """An offline generator, called as `function(out, seed=seed, **{keyword: value of each option})`."""

    function: str  # "module:function", imported only when it runs
    options: tuple[Option, ...] = ()


@dataclass(frozen=True)
class Dataset:
    """A dataset: its DataModule, source files and how they become `<data-dir>/<folder>`, the DataModule's default
    `data_dir`, and its offline generator if it has one.

    Archives unpack by `members`: (prefix inside the tar, destination prefix) pairs, members
    outside every prefix are skipped. Without `members` each file is copied, or gunzipped
    (name minus `.gz`) when `gunzip`. `expected` lists the paths (relative to the folder) the
    readers need; an unpacked archive missing one of them is rejected.
    """

    name: str
    folder: str
    datamodule: str  # "module:class" of the DataModule reading it; its `name` is `folder`, so it reads the download
    summary: str
    files: tuple[SourceFile, ...]
    expected: tuple[str, ...]
    members: tuple[tuple[str, str], ...] = ()
    gunzip: bool = False
    generator: Generator | None = None  # `seqssm data prepare NAME` without --source runs it


LRA = SourceFile("lra_release.gz", ("https://storage.googleapis.com/long-range-arena/lra_release.gz",))
LRA_ROOT = "lra_release/lra_release/"
PATHFINDER_RESOLUTIONS = (32, 64, 128, 256)
PATHFINDER_LEVELS = ("curv_baseline", "curv_contour_length_9", "curv_contour_length_14")

MNIST_MIRRORS = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
MNIST_FILES = (
    ("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873", 9912422),
    ("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432", 28881),
    ("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3", 1648877),
    ("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c", 4542),
)

NCBI = "https://ftp.ncbi.nlm.nih.gov/genomes/"
# species -> (assembly, the folder HyenaDNA's README names under genomes/, or None if it already is genomes/all)
GENOMES = {
    "human": ("GCA_009914755.4_T2T-CHM13v2.0", None),
    "lemur": ("GCA_020740605.1_mLemCat1.pri", "genbank/vertebrate_mammalian/Lemur_catta/latest_assembly_versions"),
    "mouse": ("GCA_921998355.2_A_J_v3", "genbank/vertebrate_mammalian/Mus_musculus/latest_assembly_versions"),
    "pig": ("GCA_002844635.1_USMARCv1.0", "genbank/vertebrate_mammalian/Sus_scrofa/latest_assembly_versions"),
    "hippo": ("GCA_023065835.1_ASM2306583v1",
              "genbank/vertebrate_mammalian/Hippopotamus_amphibius/latest_assembly_versions"),
}


def chromosome_urls(assembly: str, readme_folder: str | None, chrom: str) -> tuple[str, ...]:
    """URLs of `chr<chrom>.fna.gz` of an NCBI assembly: the genomes/all path, then HyenaDNA's README path."""
    digits = assembly.split("_")[1].split(".")[0]  # GCA_020740605.1_x -> 020740605
    tail = f"{assembly}/{assembly}_assembly_structure/Primary_Assembly/assembled_chromosomes/FASTA/chr{chrom}.fna.gz"
    urls = [f"{NCBI}all/GCA/{digits[:3]}/{digits[3:6]}/{digits[6:]}/{tail}"]
    if readme_folder:
        urls.append(f"{NCBI}{readme_folder}/{tail}")
    return tuple(urls)


def species_chromosomes(species: str) -> list[str]:
    """Every chromosome a species' train / valid / test split reads."""
    return [c for part in ("train", "valid", "test") for c in SPECIES_SPLITS[species][part]]


SPECIES_FILES = tuple(SourceFile(f"{sp}/chr{c}.fna.gz", chromosome_urls(*GENOMES[sp], c))
                      for sp in DEFAULT_SPECIES for c in species_chromosomes(sp))


DATASETS: dict[str, Dataset] = {d.name: d for d in (
    Dataset("listops", "listops", "seqssm.data.lra.listops:ListOpsDataModule", "LRA ListOps (LRA release)", (LRA,),
            expected=("basic_train.tsv", "basic_val.tsv", "basic_test.tsv"),
            members=((LRA_ROOT + "listops-1000/", ""),),
            generator=Generator("seqssm.data.generators.listops:write_listops", (
                Option("n_train", 96_000, count=True), Option("n_val", 2_000, count=True),
                Option("n_test", 2_000, count=True),
                Option("min_length", 500, "shortest expression (tokens)", count=True),
                Option("max_length", 2000, "longest expression (tokens)", count=True)))),
    Dataset("aan", "aan", "seqssm.data.lra.aan:AANDataModule", "LRA retrieval, AAN pairs (LRA release)", (LRA,),
            expected=("new_aan_pairs.train.tsv", "new_aan_pairs.eval.tsv", "new_aan_pairs.test.tsv"),
            members=((LRA_ROOT + "tsv_data/", ""),)),
    Dataset("pathfinder", "pathfinder", "seqssm.data.lra.pathfinder:PathfinderDataModule",
            "LRA Pathfinder 32/64/128/256, Path-X = 128 (LRA release)", (LRA,),
            # what the recipes read: Pathfinder at 32 and Path-X at 128, the hard level
            expected=tuple(f"pathfinder{r}/curv_contour_length_14/metadata" for r in (32, 128)),
            members=tuple((f"{LRA_ROOT}pathfinder{r}/", f"pathfinder{r}/") for r in PATHFINDER_RESOLUTIONS),
            generator=Generator("seqssm.data.generators.pathfinder:write_pathfinder", (
                Option("resolution", 32, keyword="res", count=True), Option("level", "curv_contour_length_14"),
                Option("n", 10_000, "images to generate", count=True)))),
    Dataset("imdb", "imdb", "seqssm.data.lra.imdb:IMDBDataModule", "IMDB reviews, Stanford release", (SourceFile(
        "aclImdb_v1.tar.gz", ("https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",),
        md5="7c2ac02c03563afcf9b574c7e56c153a", size=84125825),),
            expected=tuple(f"aclImdb/{s}/{y}" for s in ("train", "test") for y in ("pos", "neg")),
            members=(("aclImdb/", "aclImdb/"),)),
    Dataset("cifar10", "cifar10", "seqssm.data.lra.cifar:CIFAR10DataModule", "CIFAR-10, python batches", (SourceFile(
        "cifar-10-python.tar.gz", ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
        md5="c58f30108f718f92721af3b95e74349a", size=170498071),),
            expected=tuple(f"cifar-10-batches-py/{b}" for b in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]),
            members=(("cifar-10-batches-py/", "cifar-10-batches-py/"),)),
    Dataset("mnist", "mnist", "seqssm.data.smnist:SMNISTDataModule", "MNIST, four IDX files", tuple(
        SourceFile(name, tuple(m + name for m in MNIST_MIRRORS), md5=md5, size=size) for name, md5, size in MNIST_FILES),
            expected=tuple(name for name, _, _ in MNIST_FILES)),
    Dataset("species", "species", "seqssm.data.species:SpeciesDataModule",
            f"genomes of {', '.join(DEFAULT_SPECIES)} (NCBI, as HyenaDNA)", SPECIES_FILES,
            expected=tuple(f.name[: -len(".gz")] for f in SPECIES_FILES), gunzip=True,
            generator=Generator("seqssm.data.generators.genome:write_genomes", (
                Option("species", DEFAULT_SPECIES),
                Option("length", 200_000, "bases per synthetic chromosome", keyword="chrom_length", count=True),
                Option("order", 4, "Markov order")))),
)}


def download_command(name: str, data_dir: str | Path, prepare_options: str = "") -> str:
    """The command that puts dataset `name` at `data_dir`, the DataModule's folder (plus the generator, if any)."""
    dataset, data_dir = DATASETS[name], Path(data_dir)
    root = data_dir.parent if data_dir.name == dataset.folder else None
    command = f"seqssm data download {name}"
    if root is None:
        command += f" --data-dir DIR   (writes DIR/{dataset.folder}; point data_dir there)"
    elif root != Path("data"):
        command += f" --data-dir {root}"
    if dataset.generator is not None:
        command += f"\nor, generated offline:\n    seqssm data prepare {name}{prepare_options} --out {data_dir}"
    return command
