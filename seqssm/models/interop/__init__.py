"""Pretrained Mamba language models of other libraries: Hugging Face transformers and mamba_ssm folders."""

from seqssm.errors import PretrainedFormatError
from seqssm.models.interop.convert import architecture_overrides, convert_folder, copy_tokenizer
from seqssm.models.interop.mamba import (
    FORMATS,
    detect_format,
    hf_config,
    load_model,
    read_foreign_config,
    read_safetensors,
    read_state_dict,
    save_hf,
)

__all__ = [
    "FORMATS",
    "PretrainedFormatError",
    "architecture_overrides",
    "convert_folder",
    "copy_tokenizer",
    "detect_format",
    "hf_config",
    "load_model",
    "read_foreign_config",
    "read_safetensors",
    "read_state_dict",
    "save_hf",
]
