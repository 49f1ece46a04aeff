"""`seqssm data download`: fetch a dataset's published files, verified and resumable, and unpack them.

Each file streams into `<data-dir>/downloads/<name>.part` (a progress bar shows bytes, rate and
ETA); after a dropped connection, or in the next run, the transfer continues from the bytes
already there with an HTTP Range request. The finished file is checked against its published
md5 (CIFAR-10, MNIST, IMDB) or against the size and sha256 recorded in
`<data-dir>/downloads/digests.json` at its first verified use, and only then renamed to
`<data-dir>/downloads/<name>`. `seqssm.data.extract` unpacks it into the dataset's folder.
Only the standard library speaks HTTP here, and nothing touches the network until a download
is asked for.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import socket
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence
from urllib.parse import quote

from tqdm.auto import tqdm

from seqssm.errors import CorruptFileError, DataFormatError, DigestMismatchError, DownloadError
from seqssm.files import atomic_write

from .extract import bar_disabled, is_complete, unpack
from .io import size_text
from .sources import DATASETS, Dataset, SourceFile

MIRROR_ENV = "SEQSSM_DATA_MIRROR"
DOWNLOADS = "downloads"  # under the data dir: fetched files, partial ones and the digest record
DIGESTS = "digests.json"
CHUNK = 1 << 20
TIMEOUT = 30  # seconds without a byte before a connection counts as dropped (or a server as not answering)
ATTEMPTS = 5  # tries in a row that bring no new bytes before giving up
USER_AGENT = "seqssm-data (Python urllib)"
PERMANENT_HTTP = {400, 401, 403, 404, 410}  # the next URL may have it; retrying this one will not help
# failures worth retrying (a dropped or stalled connection); others, such as a full disk, propagate
TRANSIENT = (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError, ssl.SSLError)
# failures of reaching a host at all (no DNS, nothing listening): retrying the same URL at once does not help
UNREACHABLE = (socket.gaierror, ConnectionRefusedError)
HEX_DIGITS = {"md5": 32, "sha256": 64}  # the digests a record entry may hold beside its "size"


class NoAnswer(Exception):
    """A server that took no connection, or sent no answer, within TIMEOUT seconds."""


@dataclass(frozen=True)
class Digests:
    """Size and digests of a file's bytes."""

    size: int
    md5: str
    sha256: str

    def get(self, key: str):
        return getattr(self, key)


class Hasher:
    """md5 + sha256 + byte count, fed chunk by chunk while a file streams in."""

    def __init__(self):
        self.size, self.md5, self.sha256 = 0, hashlib.md5(), hashlib.sha256()

    def reset(self) -> None:
        self.__init__()

    def update(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self.md5.update(chunk)
        self.sha256.update(chunk)

    def result(self) -> Digests:
        return Digests(self.size, self.md5.hexdigest(), self.sha256.hexdigest())


def hash_file(path: Path, desc: str, progress: bool | None = None) -> Hasher:
    """A Hasher fed with the whole of `path`."""
    hasher = Hasher()
    with open(path, "rb") as f, tqdm(total=path.stat().st_size, desc=desc, unit="B", unit_scale=True,
                                     unit_divisor=1024, disable=bar_disabled(progress), leave=False) as bar:
        while chunk := f.read(CHUNK):
            hasher.update(chunk)
            bar.update(len(chunk))
    return hasher


class DigestRecord:
    """`<data-dir>/downloads/digests.json`: size and sha256 of files without a published digest, kept at first verified use."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.entries: dict[str, dict] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        except UnicodeDecodeError:
            raise DataFormatError(f"{path}: not UTF-8 text; delete it to record the digests afresh") from None
        except json.JSONDecodeError as e:
            raise DataFormatError(f"{path}: not valid JSON ({e}); delete it to record the digests afresh") from None
        if not isinstance(self.entries, dict):
            raise DataFormatError(f"{path}: not a JSON object; delete it to record the digests afresh")
        for name, entry in self.entries.items():
            if not valid_record_entry(entry):
                raise DataFormatError(
                    f"{path}: the entry {name!r} is {json.dumps(entry)[:80]}, not a file's size and digest "
                    '({"size": BYTES, "sha256": "64 hex digits"}); delete that entry (or the file), and it is '
                    "recorded afresh at the file's next verified download")

    def add(self, name: str, digests: Digests) -> None:
        self.entries[name] = {"size": digests.size, "sha256": digests.sha256}
        atomic_write(self.path, json.dumps(self.entries, indent=1, sort_keys=True) + "\n")


def valid_record_entry(entry) -> bool:
    """Whether `entry` is what DigestRecord.add writes: a size (int >= 0) and hex digests, nothing else."""
    if not isinstance(entry, dict) or not entry or not set(entry) <= {"size", *HEX_DIGITS}:
        return False
    size = entry.get("size", 0)
    return type(size) is int and size >= 0 and all(
        isinstance(entry[key], str) and re.fullmatch(f"[0-9a-f]{{{n}}}", entry[key]) is not None
        for key, n in HEX_DIGITS.items() if key in entry)


def expected_digests(source: SourceFile, record: DigestRecord) -> dict | None:
    """What `source` must hash to: its published md5, else its recorded size + sha256, else None (nothing known yet)."""
    return {"md5": source.md5} if source.md5 else record.entries.get(source.name)


def check(name: str, expected: dict | None, actual: Digests, where: str) -> None:
    """Raise DigestMismatchError naming the file, the expected and the actual value if any expected digest differs."""
    for key, value in (expected or {}).items():
        if actual.get(key) != value:
            raise DigestMismatchError(
                f"{name}: {key} mismatch: expected {value}, got {actual.get(key)} ({where}). "
                "Run the command again to download it afresh; if the source changed on purpose, pass --no-verify")


def mirror_url(mirror: str, name: str) -> str:
    """`<mirror>/<name>`; a mirror without a scheme is a local folder."""
    base = mirror if "://" in mirror else Path(mirror).expanduser().resolve().as_uri()
    return base.rstrip("/") + "/" + quote(name)


def fetch(urls: Sequence[str], part: Path, progress: bool | None = None, attempts: int | None = None,
          name: str | None = None) -> Digests:
    """Stream the file at the first of `urls` that has it into `part`, continuing any bytes already there.

    A dropped connection is retried with a Range request at once if it brought new bytes,
    after a growing pause otherwise; `attempts` (default ATTEMPTS) tries in a row without new bytes raise
    DownloadError, and the `part` file stays for the next call to resume. Returns the
    digests of the whole file; `name` labels the progress bar and errors.
    """
    name, attempts = name or part.name.removesuffix(".part"), attempts or ATTEMPTS
    part.parent.mkdir(parents=True, exist_ok=True)
    hasher = hash_file(part, f"re-reading {part.name}", progress) if part.exists() else Hasher()
    fruitless = 0
    with tqdm(initial=hasher.size, desc=name, unit="B", unit_scale=True, unit_divisor=1024,
              disable=bar_disabled(progress)) as bar:
        while True:
            before, errors, restarted = hasher.size, [], False
            for url in urls:
                try:
                    _transfer(url, part, hasher, bar)
                    return hasher.result()
                except NoAnswer as e:  # a server that ignores one request ignores the next: try the next URL
                    errors.append(f"{url}: {e}")
                    continue
                except urllib.error.HTTPError as e:
                    errors.append(f"{url}: HTTP {e.code} {e.reason}")
                    if e.code == 416 and hasher.size:  # our bytes reach past the file's end: start over
                        part.unlink()
                        hasher.reset()
                        bar.reset()
                        restarted = True
                    elif e.code in PERMANENT_HTTP:
                        continue
                except TRANSIENT as e:
                    reason = getattr(e, "reason", None) or e
                    errors.append(f"{url}: {type(reason).__name__}: {reason}")
                    if isinstance(reason, (FileNotFoundError, *UNREACHABLE)):  # no such local file, or no host
                        continue
                break  # a transient failure: retry after the pause
            else:
                raise given_up(name, part, hasher.size, errors)
            if restarted:
                continue
            fruitless = 0 if hasher.size > before else fruitless + 1
            if fruitless >= attempts:
                raise given_up(name, part, hasher.size, errors)
            time.sleep(0.5 * 2**fruitless if fruitless else 0.0)


def given_up(name: str, part: Path, kept: int, errors: list[str]) -> DownloadError:
    """The error of a fetch that stops: the bytes kept in `part` for the next run to resume, or, when none came, no
    `part` left behind (an empty one would promise a resume)."""
    if kept:
        return DownloadError(f"cannot download {name} ({kept} bytes kept in {part}; run the command again to "
                             "resume): " + "; ".join(errors))
    part.unlink(missing_ok=True)
    return DownloadError(f"cannot download {name}: " + "; ".join(errors))


def _transfer(url: str, part: Path, hasher: Hasher, bar: tqdm) -> None:
    """One request: append the bytes after `hasher.size` to `part`; raises unless the file is then complete."""
    start = hasher.size
    headers = {"User-Agent": USER_AGENT, **({"Range": f"bytes={start}-"} if start else {})}
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT)
    except TimeoutError as e:  # connected, then no answer
        raise NoAnswer(f"no answer within {TIMEOUT} s (the server took the connection, then sent nothing)") from e
    except urllib.error.URLError as e:  # urllib wraps a timeout while connecting
        if isinstance(e.reason, TimeoutError):
            raise NoAnswer(f"no connection within {TIMEOUT} s") from e
        raise
    with response:
        status = getattr(response, "status", None) or 200  # file:// answers have no status
        if status == 206 and not response.headers.get("Content-Range", "").startswith(f"bytes {start}-"):
            raise http.client.HTTPException(f"asked for bytes from {start}, got {response.headers.get('Content-Range')!r}")
        if status != 206 and start:  # the server ignored the Range header and sends the whole file
            hasher.reset()
            bar.reset()
        total = _total_size(response, hasher.size)
        bar.total = total
        bar.refresh()
        with open(part, "ab" if hasher.size else "wb") as f:
            while chunk := response.read(CHUNK):
                f.write(chunk)
                hasher.update(chunk)
                bar.update(len(chunk))
    if total is not None and hasher.size < total:
        raise http.client.IncompleteRead(b"", total - hasher.size)


def _total_size(response, offset: int) -> int | None:
    """The whole file's size from Content-Range or Content-Length, None if the server does not say."""
    content_range = response.headers.get("Content-Range", "")
    if "/" in content_range and content_range.rsplit("/", 1)[1].isdigit():
        return int(content_range.rsplit("/", 1)[1])
    length = response.headers.get("Content-Length")
    return offset + int(length) if length and length.isdigit() else None


def obtain(source: SourceFile, downloads: Path, mirror: str | None, record: DigestRecord | None,
           progress: bool | None = None) -> tuple[Path, Digests | None, str | None]:
    """(local path, digests or None, URL fetched from or None) of `source`, fetched unless already in `downloads`.

    `record` None means --no-verify: nothing is checked. A file failing its check is removed.
    """
    dest = downloads / source.name
    expected = expected_digests(source, record) if record is not None else None
    if dest.exists():
        if record is None:
            return dest, None, None
        digests = hash_file(dest, f"checking {source.name}", progress).result()
        try:
            check(source.name, expected, digests, f"in {dest}, removed")
        except DigestMismatchError:
            dest.unlink()
            raise
        return dest, digests, None
    urls = (mirror_url(mirror, source.name),) if mirror else source.urls
    part = dest.with_name(dest.name + ".part")
    digests = fetch(urls, part, progress, name=source.name)
    if record is not None:
        try:
            check(source.name, expected, digests, f"downloaded from {urls[0]}, removed")
        except DigestMismatchError:
            part.unlink()
            raise
    os.replace(part, dest)
    return dest, digests, urls[0]


def download(names: Iterable[str], data_dir: str | Path = "data", mirror: str | None = None, verify: bool = True,
             progress: bool | None = None, log: Callable[[str], None] = print) -> None:
    """Fetch and unpack datasets `names` into `<data_dir>/<folder>`; datasets already complete are left alone.

    `mirror` (default: $SEQSSM_DATA_MIRROR) replaces every source URL by `<mirror>/<file name>`;
    `verify=False` skips the digest checks (and records nothing).
    """
    data_dir = Path(data_dir)
    mirror = mirror or os.environ.get(MIRROR_ENV) or None
    datasets = [dataset(n) for n in dict.fromkeys(names)]
    todo = []
    for d in datasets:
        if is_complete(d, data_dir / d.folder):
            log(f"{d.name}: already complete in {data_dir / d.folder}")
        else:
            todo.append(d)
    if not todo:
        return
    downloads = data_dir / DOWNLOADS
    downloads.mkdir(parents=True, exist_ok=True)
    record = DigestRecord(downloads / DIGESTS) if verify else None
    local, provenance, fresh = {}, {}, {}
    for source in {f.name: f for d in todo for f in d.files}.values():
        try:
            path, digests, url = obtain(source, downloads, mirror, record, progress)
        except DownloadError as e:
            # a wrong file says what to do itself, and so does one partly here (resume it)
            if isinstance(e, DigestMismatchError) or (downloads / f"{source.name}.part").exists():
                raise
            raise DownloadError(f"{e}. {bring_over(source, [d for d in todo if source in d.files])}") from None
        local[source.name] = path
        provenance[source.name] = {"from": url or str(path),
                                   **({"size": digests.size, "sha256": digests.sha256} if digests else {})}
        if record is not None and digests and not source.md5 and source.name not in record.entries:
            fresh[source.name] = digests
    try:
        unpack([(d, data_dir / d.folder) for d in todo], local, provenance, progress)
    except CorruptFileError as e:  # e.g. an error page served as the file: fetch it afresh next time
        if e.path.parent.resolve().is_relative_to(downloads.resolve()) and e.path.exists():
            e.path.unlink()
            raise CorruptFileError(e.path, f"{e} (removed; run the command again to download it afresh)") from None
        raise
    for name, digests in fresh.items():  # unpacked without complaint: the first verified use
        record.add(name, digests)
    unverified = "" if verify else " (not verified: --no-verify skipped the digest checks)"
    for d in todo:
        log(f"{d.name}: ready in {data_dir / d.folder}{unverified}")


def bring_over(source: SourceFile, datasets: list[Dataset]) -> str:
    """How to get `source` (a file of `datasets`) here without this machine reaching its URLs."""
    name = datasets[0].name
    given = "FILE" if len(datasets[0].files) == 1 else f"FOLDER (holding {source.name} and the other source files)"
    return (f"To bring it over without network here: download {source.urls[0]} on a machine that has network, copy "
            f"it into a folder here as {source.name}, and pass that folder as --mirror (seqssm data download "
            f"{name} --mirror FOLDER), or unpack it with: seqssm data prepare {name} --source {given}")


def dataset(name: str) -> Dataset:
    """The table entry of `name`, or a clear error listing the known names."""
    if name not in DATASETS:
        raise DownloadError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    return DATASETS[name]


def status(d: Dataset, data_dir: Path) -> str:
    """One phrase on `d` under `data_dir`: complete, present, incomplete or missing, plus downloads in progress."""
    folder = data_dir / d.folder
    have = sum((folder / p).exists() for p in d.expected)
    if is_complete(d, folder):
        state = "complete"
    elif have == len(d.expected):
        state = "present (generated or copied, not downloaded)"
    elif have:
        state = f"incomplete ({have} of {len(d.expected)} paths)"
    else:
        state = "missing"
    downloads = data_dir / DOWNLOADS
    parts = [downloads / (f.name + ".part") for f in d.files if (downloads / (f.name + ".part")).exists()]
    if parts and state != "complete":
        state += f"; {size_text(sum(p.stat().st_size for p in parts))} partly downloaded (resumable)"
    return state


def download_size(d: Dataset, data_dir: Path) -> str:
    """Total bytes of `d`'s source files, from the table, the digest record or the files on disk."""
    recorded = DigestRecord(data_dir / DOWNLOADS / DIGESTS).entries if (data_dir / DOWNLOADS / DIGESTS).exists() else {}
    total = 0
    for f in d.files:
        on_disk = data_dir / DOWNLOADS / f.name
        size = f.size or recorded.get(f.name, {}).get("size") or (on_disk.stat().st_size if on_disk.exists() else None)
        if size is None:
            return "unknown"
        total += size
    return size_text(total)


def listing(data_dir: str | Path = "data") -> list[dict[str, str]]:
    """One row per dataset: name, source files, download size, folder and status (for `seqssm data list`)."""
    data_dir = Path(data_dir)
    rows = []
    for d in DATASETS.values():
        sources = d.files[0].name if len(d.files) == 1 else f"{len(d.files)} files ({d.files[0].name}, ...)"
        shared = [o.name for o in DATASETS.values() if o is not d and o.files == d.files]
        rows.append({"dataset": d.name, "source": sources + (f" (shared with {', '.join(shared)})" if shared else ""),
                     "size": download_size(d, data_dir), "folder": str(data_dir / d.folder),
                     "status": status(d, data_dir)})
    return rows
