"""Unpack published files into a dataset's folder: untar, gunzip or copy into a temporary folder, check, move.

An interrupted unpack leaves only `<data-dir>/.<folder>.unpacking/` (removed by the next run),
never a folder that looks complete: the dataset counts as complete once its marker file
`MARKER`, written after everything else has moved into place, exists.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tarfile
import zlib
from collections import defaultdict
from pathlib import Path, PurePosixPath

from tqdm.auto import tqdm

from seqssm.errors import CorruptFileError
from seqssm.files import atomic_write
from .sources import Dataset

MARKER = ".seqssm-download.json"  # in a dataset folder: which files it was unpacked from


def is_complete(dataset: Dataset, folder: Path) -> bool:
    """Whether `folder` holds a finished unpack of `dataset` (its marker and every path the readers need)."""
    return (folder / MARKER).is_file() and all((folder / p).exists() for p in dataset.expected)


def unpack(jobs: list[tuple[Dataset, Path]], files: dict[str, Path], provenance: dict[str, dict],
           progress: bool | None = None) -> None:
    """Unpack each (dataset, folder) job from `files` (source name -> local path) and move it into `folder`.

    Archives shared by several jobs (the LRA release) are read once. `provenance` (source
    name -> url / digests) is written into each folder's marker.
    """
    staging = {d.name: folder.parent / f".{folder.name}.unpacking" for d, folder in jobs}
    try:
        for d, _ in jobs:
            shutil.rmtree(staging[d.name], ignore_errors=True)
            staging[d.name].mkdir(parents=True)
        readers = defaultdict(list)  # archive name -> [(member prefix, destination folder)]
        for d, _ in jobs:
            if d.members:
                for f in d.files:
                    readers[f.name] += [(prefix, staging[d.name] / dest) for prefix, dest in d.members]
            else:
                for f in tqdm(d.files, desc=f"unpacking {d.name}", unit=" files", disable=bar_disabled(progress)):
                    target = staging[d.name] / (f.name.removesuffix(".gz") if d.gunzip else f.name)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    (gunzip_file if d.gunzip else shutil.copyfile)(files[f.name], target)
        for archive, routes in readers.items():
            untar(files[archive], routes, progress)
        for d, folder in jobs:
            lacking = [p for p in d.expected if not (staging[d.name] / p).exists()]
            if lacking:  # blame the archive; for loose files the reader's own error names the one missing
                source = files[d.files[0].name]
                raise CorruptFileError(source, f"{source}: unpacking {d.name} gave no {lacking[0]} ({len(lacking)} of "
                                               f"{len(d.expected)} expected paths missing); is this the published file?")
            marker = {"dataset": d.name, "files": {f.name: provenance.get(f.name, {}) for f in d.files}}
            commit(staging[d.name], folder, marker)
    finally:
        for tmp in staging.values():
            shutil.rmtree(tmp, ignore_errors=True)


def commit(staging: Path, folder: Path, marker: dict) -> None:
    """Move every entry of `staging` into `folder` (replacing same-named entries), then write the marker."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).unlink(missing_ok=True)
    for entry in sorted(staging.iterdir()):
        target = folder / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        os.replace(entry, target)
    atomic_write(folder / MARKER, json.dumps(marker, indent=1) + "\n")


def gunzip_file(src: Path, dest: Path, fix: str = "download it again") -> None:
    """Decompress `src` into `dest` through a temporary beside it, so `dest` appears only complete.

    gzip's CRC and length checks reject a corrupt or truncated file (CorruptFileError ending in `fix`);
    on that or any other failure (a full disk, Ctrl-C) the temporary is removed.
    """
    def unzip(tmp: Path) -> None:
        with gzip.open(src, "rb") as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)

    try:
        atomic_write(dest, unzip)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise CorruptFileError(src, f"{src}: truncated or corrupt gzip file, cannot unzip it ({e}); {fix}") from None


def untar(archive: Path, routes: list[tuple[str, Path]], progress: bool | None = None) -> None:
    """Copy every regular member of a (compressed) tar whose path starts with a route's prefix into
    that route's folder, minus the prefix; one pass, front to back. Paths that would leave the folder are skipped."""
    size = archive.stat().st_size
    with open(archive, "rb") as raw, tqdm.wrapattr(raw, "read", total=size, desc=f"unpacking {archive.name}",
                                                     disable=bar_disabled(progress)) as counted:
        try:
            # random-access mode read front to back: far faster per member than the "r|" stream mode
            with tarfile.open(fileobj=counted, mode="r:*") as tar:
                while (member := tar.next()) is not None:
                    tar.members.clear()  # tarfile keeps every header; the LRA release has millions
                    if not member.isfile():
                        continue
                    name = member.name
                    while name.startswith("./"):
                        name = name[2:]
                    targets = [dest / rel for prefix, dest in routes if name.startswith(prefix)
                               for rel in [PurePosixPath(name[len(prefix):])]
                               if rel.parts and not rel.is_absolute() and ".." not in rel.parts]
                    if not targets:
                        continue
                    for target in targets:
                        target.parent.mkdir(parents=True, exist_ok=True)
                    with tar.extractfile(member) as src, open(targets[0], "wb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)
                    for target in targets[1:]:  # a stream cannot be re-read
                        shutil.copyfile(targets[0], target)
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
            reason = " ".join(str(e).split())  # tarfile lists each method it tried on its own line
            raise CorruptFileError(archive, f"{archive}: cannot read the archive ({type(e).__name__}: {reason}); "
                                            "it is corrupt or truncated") from None


def bar_disabled(progress: bool | None) -> bool | None:
    """tqdm's `disable`: None (the default) shows bars only on a terminal."""
    return None if progress is None else not progress
