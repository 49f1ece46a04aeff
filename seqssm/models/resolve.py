"""Where a pretrained model named by the user lies on this machine: a local folder or file as given, else a Hugging
Face Hub repository (`ORG/NAME`, optionally `ORG/NAME@REVISION`) fetched once into the shared Hugging Face cache
(huggingface_hub's blobs / refs / snapshots layout, `HF_HUB_CACHE`) and read from there afterwards.

A local path of that name always wins. Only the files the caller names are fetched (a model's:
`seqssm.models.formats.files.MODEL_FILE_PATTERNS`). Offline (`HF_HUB_OFFLINE=1`) or with the Hub unreachable,
huggingface_hub serves the cached snapshot, and refuses one that a cut-off download left incomplete; a file it never finished
stays an `.incomplete` blob, never a snapshot entry, and safetensors files are checked for truncation when read. A
snapshot served without a file the model needs (an entry whose blob is gone, or a file never fetched) is named
"only partly in the cache", with the command that fetches it again (`missing_from`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from seqssm.errors import DownloadError, MissingFileError

# ORG/NAME as the Hub spells repository ids (huggingface_hub's REPO_ID_REGEX, with the namespace required: a bare
# name is far more often a mistyped local folder), optionally @REVISION
HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95})(@(?P<revision>[\w./-]+))?", re.ASCII)
# names that are files seqssm reads, never repositories
FILE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin", ".safetensors", ".json")


def hub_id(text: str) -> tuple[str, str | None] | None:
    """(repo id, revision or None) when `text` is spelled like a Hub id (ORG/NAME[@REVISION]), else None."""
    match = HUB_ID.fullmatch(str(text))
    if not match or "--" in match["repo"] or ".." in match["repo"] or match["repo"].endswith(FILE_SUFFIXES):
        return None
    return match["repo"], match["revision"]


def resolve(source: str | Path, patterns: Sequence[str], revision: str | None = None,
            cache_dir: str | Path | None = None, what: str = "path") -> Path:
    """The local path of `source`: itself when it exists, else the cached snapshot folder of the Hub id it spells,
    holding the repository's files that match `patterns` (fetched when missing); `what` names the argument in
    errors, which tell a mistyped path from a missing model."""
    path = Path(source)
    if path.exists():
        return path
    parsed = hub_id(str(source))
    if parsed is None:
        raise MissingFileError(f"{what}: {source}: no such file or folder (nor a Hub id, which reads ORG/NAME)")
    repo, at = parsed
    if at is not None and revision is not None and at != revision:
        raise MissingFileError(f"{what}: {source} names revision {at!r}, but revision {revision!r} was given too")
    return fetch(repo, patterns, revision or at, cache_dir, what)


def fetch(repo: str, patterns: Sequence[str], revision: str | None = None, cache_dir: str | Path | None = None,
          what: str = "path") -> Path:
    """The snapshot folder of Hub model `repo` at `revision` (default "main") in the Hugging Face cache, fetching
    the files matching `patterns` when online; errors name the id, the revision and how to get it."""
    import httpx2
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    from seqssm import __version__

    rev = revision or constants.DEFAULT_REVISION
    cache = Path(cache_dir) if cache_dir is not None else Path(constants.HF_HUB_CACHE)
    where = f"{what}: no local folder {repo}, and the Hub model {repo} at revision {rev!r}"
    fetch_it = (f"fetch it on a machine with access (`hf download {repo} --revision {rev}`, then copy "
                f"{cache / ('models--' + repo.replace('/', '--'))}) or run this once online")
    try:
        snapshot = Path(snapshot_download(repo, revision=rev, cache_dir=cache_dir, allow_patterns=list(patterns),
                                          library_name="seqssm", library_version=__version__))
    except RevisionNotFoundError:
        raise MissingFileError(f"{where} does not exist: the Hub has no such branch, tag or commit") from None
    except RepositoryNotFoundError:
        raise MissingFileError(f"{where} does not exist (or is private or gated: log in with `hf auth login`); "
                               "a local path must exist as given") from None
    except LocalEntryNotFoundError as e:  # offline or unreachable, and not (completely) in the cache
        reason = "HF_HUB_OFFLINE is set" if constants.is_offline_mode() else "the Hub cannot be reached"
        incomplete = " only partly (an interrupted download)" if "incomplete" in str(e) else ""
        raise MissingFileError(f"{where} is{incomplete or ' not'} in the Hugging Face cache {cache}, and {reason}; "
                               f"{fetch_it}") from None
    except (HfHubHTTPError, OSError, httpx2.HTTPError) as e:  # a refused request, a connection cut mid-file
        detail = " ".join(str(e).split())[:300]
        raise DownloadError(f"{where} could not be fetched ({type(e).__name__}: {detail}); nothing half-written is "
                            f"used: run it again, or {fetch_it}") from None
    # offline, huggingface_hub serves a snapshot as it is, also when a blob it links to was deleted
    broken = sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_symlink() and not p.exists())
    if broken:
        raise MissingFileError(f"{what}: {missing_from(snapshot, f'{broken[0]} links to a blob that is missing')}")
    return snapshot


def missing_from(folder: Path, missing: str) -> str:
    """What to say when `folder` lacks a file (`missing` says which): that alone, or, when `folder` is a model
    snapshot in a Hugging Face cache (<cache>/models--ORG--NAME/snapshots/<commit>), that the model is only partly
    in the cache, and the command that fetches it again."""
    repo_dir = Path(folder).parent.parent
    if Path(folder).parent.name != "snapshots" or not repo_dir.name.startswith("models--"):
        return missing
    repo, commit = repo_dir.name.removeprefix("models--").replace("--", "/"), Path(folder).name
    unfinished = sorted(p.name for p in (repo_dir / "blobs").glob("*.incomplete"))
    interrupted = f"; blobs/{unfinished[0]} is an interrupted download" if unfinished else ""
    return (f"the Hub model {repo} at commit {commit} is only partly in the Hugging Face cache {repo_dir.parent} "
            f"({missing}{interrupted}): fetch it again with `hf download {repo} --revision {commit}` where the Hub "
            f"can be reached (without HF_HUB_OFFLINE), or copy a complete {repo_dir} from a machine that has it")
