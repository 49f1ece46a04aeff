"""Pretrained Mamba language models of other libraries: rewriting a folder in another format (`seqssm convert`).
The formats themselves are adapters in `seqssm.models.formats`."""

from seqssm.errors import PretrainedFormatError
from seqssm.models.interop.convert import architecture_overrides, convert_folder, copy_tokenizer

__all__ = ["PretrainedFormatError", "architecture_overrides", "convert_folder", "copy_tokenizer"]
