"""Bad arguments to `SequenceModel.generate`, `sample_next` and `seqssm generate` (issue 19): each is refused with
an error naming the argument, the value and the valid range; on the command line as one line with exit code 2."""

import pytest
import torch

from seqssm.cli import main
from seqssm.models import SequenceModel, build, sample_next
from seqssm.errors import InputDtypeError, InputShapeError

VOCAB = 11


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    return build("mamba-s6", vocab_size=VOCAB, d_model=8, n_layers=1, d_state=4, dropout=0.0).eval()


PROMPT = torch.tensor([[1, 2, 3], [4, 5, 6]])


@pytest.mark.parametrize("kwargs,error,message", [
    # before: temperature=-1 sampled from the inverted distribution
    (dict(temperature=-1.0), ValueError, r"temperature must be a finite number >= 0 \(0: greedy\), got -1.0"),
    (dict(temperature=float("nan")), ValueError, r"temperature must be a finite number >= 0 .*got nan"),
    (dict(temperature="hot"), TypeError, r"temperature must be a number >= 0 .*got 'hot'"),
    # before: top_k=0 crashed inside topk
    (dict(top_k=0), ValueError, r"top_k must be None \(no cut\) or an int >= 1, got 0"),
    (dict(top_k=-3), ValueError, r"top_k must be None \(no cut\) or an int >= 1, got -3"),
    (dict(top_k=2.5), TypeError, r"top_k must be None \(no cut\) or an int >= 1, got 2.5"),
    # before: a negative count returned the prompt as if nothing was asked
    (dict(max_new_tokens=-2), ValueError, r"max_new_tokens must be an int >= 0, got -2"),
    (dict(max_new_tokens=1.5), TypeError, r"max_new_tokens must be an int >= 0, got 1.5"),
])
def test_bad_sampling_arguments_are_refused(lm, kwargs, error, message):
    args = {"max_new_tokens": 3, **kwargs}
    with pytest.raises(error, match=message):
        lm.generate(PROMPT, **args)


def test_bad_prompts_are_refused_naming_shape_and_range(lm):
    # before: an id >= vocab_size gave IndexError from the embedding
    with pytest.raises(ValueError, match=rf"input_ids must lie in \[0, vocab_size\) = \[0, {VOCAB}\), "
                                         rf"got ids from 1 to {VOCAB + 5}"):
        lm.generate(torch.tensor([[1, VOCAB + 5]]), 2)
    with pytest.raises(ValueError, match=r"got ids from -1 to 2"):
        lm.generate(torch.tensor([[-1, 2]]), 2)
    # A 1-D prompt is refused, not guessed to be batch 1 (before: IndexError).
    with pytest.raises(InputShapeError, match=r"input_ids must be token ids \(batch, L\), got shape \(3,\): "
                                              r"for one sequence pass input_ids\[None\]"):
        lm.generate(torch.tensor([1, 2, 3]), 2)
    with pytest.raises(InputShapeError, match=r"input_ids \(2, 0\) holds no prompt: give at least one token"):
        lm.generate(torch.zeros(2, 0, dtype=torch.long), 2)
    with pytest.raises(InputDtypeError, match=r"input_ids must be integer token ids \(batch, L\) \(torch.long\), "
                                              r"got torch.float32"):
        lm.generate(PROMPT.float(), 2)


def test_edge_values_that_are_valid(lm):
    assert torch.equal(lm.generate(PROMPT, 0), PROMPT)
    assert lm.generate(torch.zeros(0, 3, dtype=torch.long), 4).shape == (0, 7)  # batch 0: empty in, empty out
    greedy = lm.generate(PROMPT, 3, temperature=0)
    assert torch.equal(lm.generate(PROMPT, 3, temperature=1.0, top_k=1), greedy)
    assert lm.generate(PROMPT, 3, temperature=2, top_k=VOCAB + 100).shape == (2, 6)  # top_k past the vocabulary: all


def test_cuda_graph_needs_a_bool_and_a_cuda_model(lm):
    with pytest.raises(TypeError, match=r"cuda_graph must be True or False, got 'yes'"):
        lm.generate(PROMPT, 2, cuda_graph="yes")
    with pytest.raises(ValueError, match=r"cuda_graph=True replays CUDA graphs: it needs the model and input_ids on a "
                                         r"CUDA device, got input_ids on cpu"):
        lm.generate(PROMPT, 2, cuda_graph=True)


def test_sample_next_checks_its_arguments():
    logits = torch.randn(2, VOCAB)
    with pytest.raises(ValueError, match="temperature must be"):
        sample_next(logits, -0.5)
    with pytest.raises(ValueError, match="top_k must be"):
        sample_next(logits, 1.0, 0)
    with pytest.raises(InputShapeError, match=r"logits must be \(batch, vocab\), got \(11,\)"):
        sample_next(logits[0], 1.0)
    assert sample_next(logits, 0).shape == (2,)


@pytest.fixture(scope="module")
def lm_dir(lm, tmp_path_factory):
    folder = tmp_path_factory.mktemp("lm")
    lm.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("args,message", [
    (["--temperature", "-1"], "--temperature must be a finite number >= 0 (0: greedy), got -1.0"),
    (["--top-k", "0"], "--top-k must be None (no cut) or an int >= 1, got 0"),
    (["--max-new-tokens", "-4"], "--max-new-tokens must be an int >= 0, got -4"),
    (["--prompt", "1 99"], f"--prompt has token ids outside the model's vocabulary [0, {VOCAB}): 99"),
    (["--prompt", "-2 3"], f"--prompt has token ids outside the model's vocabulary [0, {VOCAB}): -2"),
    (["--prompt", "   "], "--prompt encodes to no tokens: give at least one"),
    (["--prompt", "hello"], "so --prompt must be token ids"),
    (["--cuda-graph", "--device", "cpu"], "--cuda-graph replays CUDA graphs, but the model runs on cpu: give --device "
                                          "cuda"),
])
def test_the_command_gives_one_line_and_exit_code_2(lm_dir, capsys, args, message):
    argv = ["generate", str(lm_dir), "--prompt", "1 2", *args]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("seqssm generate: error: ") and message in err


def test_the_command_generates_with_valid_arguments(lm, lm_dir, capsys):
    main(["generate", str(lm_dir), "--prompt", "1 2 3", "--max-new-tokens", "0"])
    assert capsys.readouterr().out.split() == ["1", "2", "3"]
    main(["generate", str(lm_dir), "--prompt", "1 2 3", "--max-new-tokens", "4"])
    expected = SequenceModel.from_pretrained(lm_dir).eval().generate(torch.tensor([[1, 2, 3]]), 4, temperature=0)
    assert capsys.readouterr().out.split() == [str(i) for i in expected[0].tolist()]


def test_the_command_samples_on_the_device_it_is_given(lm, lm_dir, capsys):
    """--device cpu with a seed repeats the library call with a CPU generator of that seed (auto is the same on a
    machine without CUDA)."""
    main(["generate", str(lm_dir), "--prompt", "1 2 3", "--max-new-tokens", "5", "--temperature", "1.0",
          "--seed", "7", "--device", "cpu"])
    model = SequenceModel.from_pretrained(lm_dir).eval()
    expected = model.generate(torch.tensor([[1, 2, 3]]), 5, temperature=1.0,
                              generator=torch.Generator("cpu").manual_seed(7))
    assert capsys.readouterr().out.split() == [str(i) for i in expected[0].tolist()]


@pytest.mark.gpu
def test_the_command_generates_on_cuda_by_default(lm, lm_dir, capsys):
    main(["generate", str(lm_dir), "--prompt", "1 2 3", "--max-new-tokens", "4"])
    expected = SequenceModel.from_pretrained(lm_dir).eval().cuda().generate(torch.tensor([[1, 2, 3]]).cuda(), 4,
                                                                             temperature=0)
    assert capsys.readouterr().out.split() == [str(i) for i in expected[0].tolist()]


@pytest.mark.gpu
def test_the_command_decodes_with_a_cuda_graph_when_asked(lm, lm_dir, capsys):
    main(["generate", str(lm_dir), "--prompt", "1 2 3", "--max-new-tokens", "6", "--cuda-graph"])
    expected = SequenceModel.from_pretrained(lm_dir).eval().cuda().generate(torch.tensor([[1, 2, 3]]).cuda(), 6,
                                                                             temperature=0)
    assert capsys.readouterr().out.split() == [str(i) for i in expected[0].tolist()]
