"""Pretrained Mamba language models of other libraries: Hugging Face transformers and mamba_ssm folders."""

from seqssm.models.interop.mamba import (
    FORMATS,
    PretrainedFormatError,
    detect_format,
    hf_config,
    load_model,
    read_foreign_config,
    read_state_dict,
    save_hf,
)

__all__ = [
    "FORMATS",
    "PretrainedFormatError",
    "detect_format",
    "hf_config",
    "load_model",
    "read_foreign_config",
    "read_state_dict",
    "save_hf",
]
