"""Minimal PNG codec (zlib only): 8-bit grayscale writer, reader for 8-bit gray/RGB(A)/gray-alpha.

Pillow is not a dependency; Pathfinder images are small 8-bit grayscale PNGs, which this
covers. Interlaced, palette and 16-bit images raise DataFormatError.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from seqssm.errors import DataFormatError


_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(image: np.ndarray) -> bytes:
    """PNG bytes of a (H, W) uint8 grayscale image."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    h, w = image.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), image], axis=1).tobytes()  # filter 0 per row
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    return _SIGNATURE + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b"")


def write_png(path: str | Path, image: np.ndarray) -> None:
    """Write a (H, W) uint8 image as 8-bit grayscale PNG."""
    Path(path).write_bytes(encode_png(image))


def _unfilter(data: bytes, h: int, w: int, bpp: int) -> np.ndarray:
    stride = w * bpp
    buf = np.frombuffer(data, dtype=np.uint8)
    if buf.size != h * (stride + 1):
        raise DataFormatError(f"PNG pixel data has {buf.size} bytes, expected {h * (stride + 1)}")
    rows = buf.reshape(h, stride + 1)
    out = np.zeros((h, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for y in range(h):
        ftype, line = rows[y, 0], rows[y, 1:]
        if ftype == 0:
            cur = line.copy()
        elif ftype == 1:  # Sub: running sum per channel (mod 256)
            cur = np.cumsum(line.reshape(-1, bpp), axis=0, dtype=np.uint64).astype(np.uint8).reshape(-1)
        elif ftype == 2:  # Up
            cur = line + prev
        elif ftype in (3, 4):  # Average / Paeth depend on the left pixel: sequential
            cur = np.zeros(stride, dtype=np.int64)
            p = prev.astype(np.int64)
            ln = line.astype(np.int64)
            for i in range(stride):
                a = cur[i - bpp] if i >= bpp else 0
                if ftype == 3:
                    cur[i] = (ln[i] + ((a + p[i]) >> 1)) & 0xFF
                else:
                    b, c = p[i], (p[i - bpp] if i >= bpp else 0)
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                    cur[i] = (ln[i] + pred) & 0xFF
            cur = cur.astype(np.uint8)
        else:
            raise DataFormatError(f"PNG row {y} has unknown filter type {ftype}")
        out[y] = cur
        prev = cur
    return out


def decode_png(blob: bytes) -> np.ndarray:
    """(H, W) uint8 grayscale of PNG bytes (colour converted with ITU-R 601 luma, like Pillow's "L")."""
    if not blob.startswith(_SIGNATURE):
        raise DataFormatError("not a PNG file (bad signature)")
    pos, idat, header = len(_SIGNATURE), [], None
    while pos + 8 <= len(blob):
        length, kind = struct.unpack(">I4s", blob[pos : pos + 8])
        data = blob[pos + 8 : pos + 8 + length]
        if len(data) != length:
            raise DataFormatError("truncated PNG chunk")
        if kind == b"IHDR":
            if length != 13:
                raise DataFormatError(f"PNG IHDR chunk of {length} bytes, expected 13")
            header = struct.unpack(">IIBBBBB", data)
        elif kind == b"IDAT":
            idat.append(data)
        elif kind == b"IEND":
            break
        pos += 12 + length
    if header is None or not idat:
        raise DataFormatError("PNG without IHDR or IDAT")
    w, h, depth, ctype, _, _, interlace = header
    if depth != 8 or ctype not in _CHANNELS or interlace:
        raise DataFormatError(f"unsupported PNG (bit depth {depth}, colour type {ctype}, interlace {interlace}); "
                              "install Pillow or convert to 8-bit grayscale")
    try:
        raw = zlib.decompress(b"".join(idat))
    except zlib.error as e:
        raise DataFormatError(f"corrupt PNG data ({e})") from None
    bpp = _CHANNELS[ctype]
    px = _unfilter(raw, h, w, bpp).reshape(h, w, bpp)
    if ctype in (0, 4):
        return np.ascontiguousarray(px[..., 0])
    rgb = px[..., :3].astype(np.uint32)
    return ((rgb[..., 0] * 299 + rgb[..., 1] * 587 + rgb[..., 2] * 114 + 500) // 1000).astype(np.uint8)


def read_png(path: str | Path) -> np.ndarray:
    """(H, W) uint8 grayscale image of a PNG file; Pillow is used when installed. Errors name the file."""
    blob = Path(path).read_bytes()
    try:
        from PIL import Image  # noqa: PLC0415 - optional, faster and more complete
    except ImportError:
        try:
            return decode_png(blob)
        except DataFormatError as e:
            raise DataFormatError(f"{path}: {e}") from None
    import io

    try:
        return np.asarray(Image.open(io.BytesIO(blob)).convert("L"))
    except Exception as e:  # Pillow raises several unrelated types for bad files
        raise DataFormatError(f"{path}: cannot decode PNG ({e})") from None
