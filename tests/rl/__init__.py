"""Tests of seqssm.rl, which needs the rl extra (gymnasium, popgym): without it every module here is skipped, with
that reason, instead of failing to import."""

import pytest

pytest.importorskip("gymnasium", reason="needs the rl extra: pip install 'seqssm[rl]'")
