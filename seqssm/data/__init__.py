"""Datasets: LightningDataModules reading the published formats, plus offline generators.

Every DataModule yields `{"inputs": (B, L) LongTensor ids or (B, L, d_input) float,
"lengths": (B,), "labels": (B,)}` and sets `vocab_size`, `d_input`, `n_classes`,
`pad_token_id` (and `mask_token_id` where one exists) in `__init__`. `seqssm data download`
(sources.py: the registry, one entry per dataset; download.py: fetching and verifying; extract.py:
unpacking) puts each dataset where its DataModule looks by default.
"""

from seqssm.errors import DataFormatError, DataNotFoundError

from .base import SeqDataModule
from .collate import PadCollate
from .lra import AANDataModule, CIFAR10DataModule, IMDBDataModule, ListOpsDataModule, PathfinderDataModule
from .smnist import SMNISTDataModule
from .species import SPECIES_SPLITS, SpeciesDataModule
from .tokenizers import ByteTokenizer, CharVocabulary, DNATokenizer, ListOpsTokenizer

__all__ = [
    "AANDataModule", "ByteTokenizer", "CIFAR10DataModule", "CharVocabulary", "DNATokenizer", "DataFormatError",
    "DataNotFoundError", "IMDBDataModule", "ListOpsDataModule", "ListOpsTokenizer", "PadCollate",
    "PathfinderDataModule", "SMNISTDataModule", "SPECIES_SPLITS", "SeqDataModule", "SpeciesDataModule",
]
