"""Long Range Arena datasets in their published layouts."""

from .aan import AANDataModule
from .cifar import CIFAR10DataModule
from .imdb import IMDBDataModule
from .listops import ListOpsDataModule
from .pathfinder import PathfinderDataModule

__all__ = ["AANDataModule", "CIFAR10DataModule", "IMDBDataModule", "ListOpsDataModule", "PathfinderDataModule"]
