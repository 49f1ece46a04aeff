"""seqssm.data.tokenized: a pretrained folder's tokenizer.json and vocab_size, read without seqssm.models."""

import json
import sys

import pytest

from seqssm.data import DataFormatError
from seqssm.errors import MissingExtraError
from seqssm.data.tokenized import PretrainedTokenizer, pretrained_vocab_size


@pytest.mark.parametrize("config, vocab_size", [
    ({"format": "seqssm", "format_version": 1, "model": {"vocab_size": 12, "d_model": 8}}, 12),  # seqssm
    ({"model_type": "mamba", "vocab_size": 50280, "hidden_size": 768}, 50280),  # Hugging Face
    ({"d_model": 768, "n_layer": 24, "vocab_size": 50277}, 50277),  # mamba_ssm
])
def test_vocab_size_of_each_folder_format(tmp_path, config, vocab_size):
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert pretrained_vocab_size(tmp_path) == vocab_size


def test_folders_without_a_vocabulary_are_refused(tmp_path):
    with pytest.raises(DataFormatError, match="no config.json"):
        pretrained_vocab_size(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"format": "seqssm", "model": {"d_input": 3, "vocab_size": None}}))
    with pytest.raises(DataFormatError, match="reads no token ids"):
        pretrained_vocab_size(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(DataFormatError, match="not valid JSON"):
        pretrained_vocab_size(tmp_path)
    with pytest.raises(DataFormatError, match="no tokenizer.json"):
        PretrainedTokenizer(tmp_path)


def test_without_tokenizers_the_error_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "tokenizer.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # what an environment without the package imports
    with pytest.raises(MissingExtraError, match=r"tokenizer.json: reading it needs the text extra \(tokenizers is "
                                                r"missing\): pip install 'seqssm\[text\]'"):
        PretrainedTokenizer(tmp_path)
