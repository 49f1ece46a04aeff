"""Fixed-vocabulary tokenizers, so `vocab_size` is known before any data is read.

- `ListOpsTokenizer`: S4's ListOps tokens in a fixed order (vocab 18).
- `ByteTokenizer`: UTF-8 bytes shifted past three specials (vocab 259), LRA's byte level.
- `CharVocabulary`: the characters of a training text (those seen at least `min_freq` times) plus three
  specials, S4's IMDB vocabulary; built from the data, so its size is known once the training split is read.
- `DNATokenizer`: HyenaDNA's character tokenizer ids (vocab 12).
Pixel datasets need no tokenizer: a grayscale value 0..255 is its own token (vocab 256).
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Sequence

import numpy as np


class ListOpsTokenizer:
    """ListOps: strip `(`/`)`, `]` -> `X`, split on whitespace, append `<eos>`; ids int (n,). Any other token (an
    operator or number ListOps does not have) is refused: S4's vocabulary would read it as `<unk>`, which trains on
    an expression that is not one."""

    SPECIALS = ("<pad>", "<unk>", "<eos>")
    TOKENS = ("[MIN", "[MAX", "[MED", "[SM", *[str(d) for d in range(10)], "X")
    pad_token_id, unk_token_id, eos_token_id = 0, 1, 2

    def __init__(self) -> None:
        self.vocab = {t: i for i, t in enumerate(self.SPECIALS + self.TOKENS)}
        self.vocab_size = len(self.vocab)
        self._token_ids = {t: self.vocab[t] for t in self.TOKENS}  # what a source may hold: no specials

    @staticmethod
    def split(source: str) -> list[str]:
        """Tokens of one LRA `Source` string, S4's rule (no parentheses, `]` written `X`)."""
        return source.replace("(", "").replace(")", "").replace("]", "X").split()

    def encode(self, source: str, max_length: int | None = None) -> np.ndarray:
        """uint8 ids (n,) with `<eos>` last; truncated so that n <= max_length (eos kept). A token that is not
        ListOps raises ValueError naming it."""
        try:
            ids = [self._token_ids[t] for t in self.split(source)]
        except KeyError as e:
            raise ValueError(f"{e.args[0]!r} is not a ListOps token (those are [MIN [MAX [MED [SM ( ) ] and the "
                             "digits 0-9)") from None
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


class CharVocabulary:
    """Character level over a vocabulary built from training texts, as S4's IMDB loader builds it (S4 code,
    src/dataloaders/lra.py, level "char"): `<pad>`=0, `<unk>`=1, `<eos>`=2, then every character (Unicode code
    point) seen at least `min_freq` times in the training texts, each text cut to its first max_length - 1
    characters, most frequent first and ties in character order. Unknown characters read as `<unk>`."""

    SPECIALS = ("<pad>", "<unk>", "<eos>")
    pad_token_id, unk_token_id, eos_token_id = 0, 1, 2
    MIN_FREQ = 15  # S4's IMDB setting (its dataset config: "char level, min_freq=15: vocab ~ 135" at L=4096)

    def __init__(self, characters: Sequence[str]):
        bad = [c for c in characters if not isinstance(c, str) or len(c) != 1]
        if bad or len(set(characters)) != len(characters):
            raise ValueError(f"a CharVocabulary takes distinct single characters, got {bad[:5] or 'repeats'}")
        self.characters = list(characters)
        self.index = {c: i + len(self.SPECIALS) for i, c in enumerate(self.characters)}
        self.vocab_size = len(self.SPECIALS) + len(self.characters)

    @classmethod
    def build(cls, texts: Iterable[str], min_freq: int = MIN_FREQ, max_length: int | None = None) -> "CharVocabulary":
        """The vocabulary of `texts` (the training split): characters with >= min_freq occurrences in the texts'
        first max_length - 1 characters (all of each text if max_length is None)."""
        if isinstance(min_freq, bool) or not isinstance(min_freq, int) or min_freq < 1:
            raise ValueError(f"min_freq must be an integer >= 1, got {min_freq!r}")
        cut = None if max_length is None else max_length - 1
        counts = Counter()
        for text in texts:
            counts.update(text[:cut])
        frequent = sorted(((-n, c) for c, n in counts.items() if n >= min_freq))
        return cls([c for _, c in frequent])

    def encode(self, text: str, max_length: int | None = None) -> np.ndarray:
        """uint16 ids (n,) of `text`'s characters then `<eos>`, n <= max_length."""
        cut = None if max_length is None else max_length - 1
        ids = [self.index.get(c, self.unk_token_id) for c in text[:cut]]
        ids.append(self.eos_token_id)
        return np.asarray(ids, dtype=np.uint16)

    def decode(self, ids) -> str:
        """Text of ids; `<unk>` written as U+FFFD, other specials dropped."""
        names = ["", "\ufffd", ""] + self.characters
        return "".join(names[i] for i in np.asarray(ids).tolist())


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
