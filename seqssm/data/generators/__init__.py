"""Offline generators writing data in the published layouts (ListOps, Pathfinder, genomes)."""

from .genome import write_genomes
from .listops import generate_listops, write_listops
from .pathfinder import PathfinderStyle, generate_pathfinder, write_pathfinder

__all__ = ["PathfinderStyle", "generate_listops", "generate_pathfinder", "write_genomes", "write_listops",
           "write_pathfinder"]
