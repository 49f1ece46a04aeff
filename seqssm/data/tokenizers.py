"""Fixed-vocabulary tokenizers, so `vocab_size` is known before any data is read.

- `ListOpsTokenizer`: S4's ListOps tokens in a fixed order (vocab 18).
- `ByteTokenizer`: UTF-8 bytes shifted past three specials (vocab 259), LRA's byte level.
- `DNATokenizer`: HyenaDNA's character tokenizer ids (vocab 12).
Pixel datasets need no tokenizer: a grayscale value 0..255 is its own token (vocab 256).
"""

from __future__ import annotations

import numpy as np


class ListOpsTokenizer:
    """ListOps: strip `(`/`)`, `]` -> `X`, split on whitespace, append `<eos>`; ids int (n,)."""

    SPECIALS = ("<pad>", "<unk>", "<eos>")
    TOKENS = ("[MIN", "[MAX", "[MED", "[SM", *[str(d) for d in range(10)], "X")
    pad_token_id, unk_token_id, eos_token_id = 0, 1, 2

    def __init__(self) -> None:
        self.vocab = {t: i for i, t in enumerate(self.SPECIALS + self.TOKENS)}
        self.vocab_size = len(self.vocab)

    @staticmethod
    def split(source: str) -> list[str]:
        """Tokens of one LRA `Source` string, S4's rule (no parentheses, `]` written `X`)."""
        return source.replace("(", "").replace(")", "").replace("]", "X").split()

    def encode(self, source: str, max_length: int | None = None) -> np.ndarray:
        """uint8 ids (n,) with `<eos>` last; truncated so that n <= max_length (eos kept)."""
        ids = [self.vocab.get(t, self.unk_token_id) for t in self.split(source)]
        if max_length is not None:
            ids = ids[: max_length - 1]
        ids.append(self.eos_token_id)
        return np.asarray(ids, dtype=np.uint8)


class ByteTokenizer:
    """Byte level: id = byte + 3; `<pad>`=0, `<eos>`=1, `<sep>`=2; vocab 259."""

    pad_token_id, eos_token_id, sep_token_id = 0, 1, 2
    offset = 3
    vocab_size = 256 + offset

    def encode(self, text: str, max_length: int | None = None, end: int | None = None) -> np.ndarray:
        """uint16 ids (n,) of `text`'s UTF-8 bytes then `end` (default `<eos>`), n <= max_length."""
        end = self.eos_token_id if end is None else end
        raw = text.encode("utf-8")
        if max_length is not None:
            raw = raw[: max_length - 1]
        ids = np.frombuffer(raw, dtype=np.uint8).astype(np.uint16) + self.offset
        return np.append(ids, np.uint16(end))

    def decode(self, ids) -> str:
        """Text of ids (specials dropped)."""
        ids = np.asarray(ids)
        return bytes((ids[ids >= self.offset] - self.offset).astype(np.uint8)).decode("utf-8", "replace")


class DNATokenizer:
    """HyenaDNA's character ids: [CLS]=0 [SEP]=1 [BOS]=2 [MASK]=3 [PAD]=4 [RESERVED]=5 [UNK]=6, A C G T N = 7..11."""

    SPECIALS = ("[CLS]", "[SEP]", "[BOS]", "[MASK]", "[PAD]", "[RESERVED]", "[UNK]")
    BASES = "ACGTN"
    cls_token_id, sep_token_id, bos_token_id, mask_token_id, pad_token_id = 0, 1, 2, 3, 4
    unk_token_id = 6
    vocab_size = len(SPECIALS) + len(BASES)

    def __init__(self) -> None:
        self.n_token_id = len(self.SPECIALS) + self.BASES.index("N")
        # Every byte maps somewhere: IUPAC codes and other letters become N (counted by the caller).
        lut = np.full(256, self.n_token_id, dtype=np.uint8)
        for i, base in enumerate(self.BASES):
            lut[ord(base)] = lut[ord(base.lower())] = len(self.SPECIALS) + i
        self._lut = lut
        self._known = np.zeros(256, dtype=bool)
        self._known[[ord(c) for c in self.BASES + self.BASES.lower()]] = True

    def encode(self, seq: str | bytes) -> tuple[np.ndarray, int]:
        """(uint8 ids (n,), number of non-ACGTN characters that were turned into N)."""
        raw = np.frombuffer(seq.encode("ascii", "replace") if isinstance(seq, str) else seq, dtype=np.uint8)
        return self._lut[raw], int(raw.size - self._known[raw].sum())

    def decode(self, ids) -> str:
        """Characters of ids; specials written as their names."""
        names = self.SPECIALS + tuple(self.BASES)
        return "".join(names[i] for i in np.asarray(ids).tolist())
