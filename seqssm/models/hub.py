"""Writing model folders and sharing them: `save_pretrained`, the model card (README.md), `push_to_hub`.

`save_pretrained(model, dir)` writes config.json + model.safetensors (or, with format="hf", the files transformers'
MambaForCausalLM loads: `seqssm.models.formats`) and a model card README.md with the Hub's metadata block. It
refuses a non-empty `dir` unless `overwrite=True`; even then it replaces only a model folder (config.json naming a
seqssm, Hugging Face or mamba_ssm model, weights beside it, and no file that no model folder holds): a user's notes,
README.md or own config.json are named, and nothing is touched. Everything is written into a staging folder beside
`dir`, which takes its place only once complete (a failure leaves `dir` as it was, and no old model file stays
beside the new); the weights are as readable as the umask allows, like the other files. Loading is
`seqssm.models.reading` (`seqssm.models.loading` binds it to SequenceModel). Nothing here unpickles anything.

A model made by surgery or `init_from` carries a `provenance` dict (its parents' paths and the operation), which
the seqssm format keeps in config.json.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from torch import nn

from seqssm.errors import OutputExistsError, UploadError, disk_full_reported
from seqssm.models import formats
from seqssm.models.formats.files import CARD_FILE, CONFIG_FILE, MODEL_FILE_PATTERNS
from seqssm.models.formats.seqssm import FORMAT_VERSION, NAME as FORMAT

__all__ = ["CONFIG_FILE", "FORMAT", "FORMAT_VERSION", "OutputExistsError", "check_repo_id", "check_target",
           "model_card", "provenance_record", "push_to_hub", "save_pretrained", "staged_folder", "write_pretrained"]


def check_target(out_dir: str | Path, overwrite: bool = False) -> Path:
    """`out_dir` as a Path if a model folder may be written there: it is new or empty, or `overwrite` is set and
    it is a model folder (`formats.not_a_model_folder`) holding model-folder files only (config.json, weights,
    tokenizer files, README.md; no sub-folders, not the working directory or one above it)."""
    out_dir = Path(out_dir)
    if not out_dir.exists():
        return out_dir
    if not out_dir.is_dir():
        raise OutputExistsError(f"{out_dir} is a file, not a folder; nothing was written. Choose a folder path.")
    content = sorted(p.name for p in out_dir.iterdir())
    if not content:
        return out_dir
    if not overwrite:
        shown = ", ".join(content[:5]) + (f", ... ({len(content)} entries)" if len(content) > 5 else "")
        raise OutputExistsError(f"{out_dir} is not empty ({shown}); nothing was written. Choose a new or empty "
                                "folder, or pass --overwrite (overwrite=True) to replace its content.")
    if out_dir.resolve() in (Path.cwd(), *Path.cwd().parents):
        raise OutputExistsError(f"refusing to replace {out_dir}: it is the working directory or holds it")
    foreign = [p.name + ("/" if p.is_dir() else "") for p in sorted(out_dir.iterdir())
               if p.is_dir() or not any(fnmatch.fnmatch(p.name, pattern) for pattern in MODEL_FILE_PATTERNS)]
    if foreign:
        raise OutputExistsError(f"refusing to replace {out_dir}: it holds {', '.join(foreign)}, which no model folder "
                                "holds; nothing was written. Move them away or choose another folder.")
    why = formats.not_a_model_folder(out_dir)
    if why:
        raise OutputExistsError(f"refusing to replace {out_dir}: it holds {', '.join(content)} but {why}, so it is "
                                "no model folder (those may be your own files); nothing was written. Move them away "
                                "or choose another folder.")
    return out_dir


@contextmanager
def staged_folder(out_dir: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """An empty folder beside `out_dir` to write into; when the block ends without error it takes the place of
    `out_dir` (whose old content goes only then), else it is removed and `out_dir` is left as it was. A full disk
    is one line naming `out_dir` (`disk_full_reported`): the writers' own messages never say so."""
    out_dir = check_target(out_dir, overwrite)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    try:
        with disk_full_reported(out_dir):
            yield stage
            if out_dir.exists():
                old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
                os.replace(out_dir, old)
                os.replace(stage, out_dir)
                shutil.rmtree(old)
            else:
                os.replace(stage, out_dir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def check_writable(model: nn.Module, format: str) -> None:
    """Raise unless `model` can be saved in `format` (before anything is written)."""
    if not callable(getattr(getattr(model, "config", None), "to_dict", None)):
        raise TypeError(f"{type(model).__name__} has no typed `config`; only seqssm SequenceModels can be saved")
    formats.writer(format).check_writable(model.config)


def save_pretrained(model: nn.Module, out_dir: str | Path, format: str = FORMAT, overwrite: bool = False,
                    card: dict | None = None) -> Path:
    """Write `model.config`, its weights and a model card to the new or empty folder `out_dir` (with `overwrite`,
    replace a model folder there) as a seqssm folder, or with format="hf" one transformers' MambaForCausalLM
    loads; `card`: `model_card`'s keyword arguments (task, datasets, metrics, hyperparameters). Returns the folder."""
    check_writable(model, format)
    with staged_folder(out_dir, overwrite) as stage:
        write_pretrained(model, stage, format, card)
    return Path(out_dir)


def write_pretrained(model: nn.Module, folder: str | Path, format: str = FORMAT, card: dict | None = None) -> None:
    """Write the files of `model` in `format`, and its model card, into the existing folder `folder`
    (`save_pretrained` stages it)."""
    check_writable(model, format)
    formats.writer(format).write(model, Path(folder))
    (Path(folder) / CARD_FILE).write_text(model_card(model, format, **(card or {})))


# The Hub's task names (pipeline tags) of seqssm's tasks
PIPELINE_TAGS = {"Classification": "text-classification", "NextTokenPrediction": "text-generation",
                 "MaskedLM": "fill-mask"}
METRIC_TYPES = {"acc": "accuracy", "ppl": "perplexity", "loss": "loss", "f1": "f1"}


def model_card(model: nn.Module, format: str = FORMAT, task: str | None = None, datasets: list[str] | tuple = (),
               metrics: dict[str, float] | None = None, hyperparameters: dict | None = None,
               name: str | None = None) -> str:
    """The README.md of a model folder: the Hub's YAML metadata block (library_name seqssm, tags: the block, the
    SSM layer, the task; datasets; metrics and their values as model-index results) and a short description.
    `task`: the seqssm task class name ("Classification", ...); `metrics`: logged name -> value ("val_acc": 0.9)."""
    from huggingface_hub import EvalResult, ModelCardData

    config = model.config
    block, layer = config.block.kind, config.block.ssp.layer
    pipeline = PIPELINE_TAGS.get(task or "") or ("text-generation" if config.is_lm and config.vocab_size else None)
    tags = ["state-space-model", "seqssm", block, layer] + ([pipeline] if pipeline else [])
    metrics = {k: float(v) for k, v in (metrics or {}).items()}
    name = name or f"seqssm {block}-{layer}"
    results = [EvalResult(task_type=pipeline, dataset_type=dataset, dataset_name=dataset,
                          metric_type=METRIC_TYPES.get(metric.rsplit("_", 1)[-1], metric), metric_name=metric,
                          metric_value=value)
               for dataset in datasets[:1] for metric, value in metrics.items()] if pipeline else None
    data = ModelCardData(library_name="seqssm", tags=list(dict.fromkeys(tags)), datasets=list(datasets) or None,
                         metrics=sorted({METRIC_TYPES.get(m.rsplit("_", 1)[-1], m) for m in metrics}) or None,
                         pipeline_tag=pipeline, model_name=name if results else None, eval_results=results or None)
    params = sum(p.numel() for p in model.parameters())
    lines = [f"# {name}", "",
             f"A {config.n_layers}-layer {block} model with {layer} state space layers (d_model {config.d_model}, "
             f"{params:,} parameters), saved by seqssm in the {format} format.", "",
             "```python", "from seqssm.models import SequenceModel", "",
             'model = SequenceModel.from_pretrained("ORG/NAME")  # or the local folder', "```"]
    if metrics:
        lines += ["", "## Metrics", "", *(f"- {k}: {v:.4g}" for k, v in sorted(metrics.items()))]
    if hyperparameters:
        lines += ["", "## Training hyper-parameters", "",
                  *(f"- {k}: {v}" for k, v in sorted(hyperparameters.items()) if not k.startswith("_"))]
    return f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines) + "\n"


def push_to_hub(folder: str | Path, repo_id: str, private: bool | None = None, revision: str | None = None,
                token: str | None = None, commit_message: str = "Upload model with seqssm") -> str:
    """Upload the model folder `folder` to the Hub repository `repo_id` (created when missing) on branch
    `revision` (default main, created from it when missing) through huggingface_hub; returns the commit's URL.
    A refusal or an unreachable Hub raises UploadError naming the repository."""
    import httpx2
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    check_repo_id(repo_id)
    api = HfApi(token=token, library_name="seqssm")
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision is not None:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), revision=revision,
                                 commit_message=commit_message)
    except (HfHubHTTPError, OSError, httpx2.HTTPError) as e:
        detail = " ".join(str(e).split())[:300]
        raise UploadError(f"{repo_id}: the upload failed ({type(e).__name__}: {detail}); {folder} is intact: "
                          "check `hf auth whoami` and the network, then push again") from None
    return str(info)


def check_repo_id(repo_id: str, what: str = "repo_id") -> str:
    """`repo_id` if it is a valid Hub repository id (ORG/NAME), else UploadError naming it and why (`what`: the
    argument that gave it); checked before anything is written or sent."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        reason = str(e).split(" Use `repo_type`")[0].rstrip(".")  # that advice is for datasets and spaces
        raise UploadError(f"{what} {repo_id!r} is not a Hub repository id ({reason}); give ORG/NAME, such as "
                          "my-org/my-model") from None
    return repo_id


def provenance_record(operation: str, **parents: tuple[str | Path | None, dict | None]) -> dict:
    """{"operation", "parents": [{"role", "path", "provenance"}]} for a model made by `operation` from
    parents given as role=(path or None, that parent's own provenance), so lineage nests back to the roots."""
    return {"operation": operation, "parents": [
        {"role": role, "path": None if path is None else str(path), "provenance": parent}
        for role, (path, parent) in parents.items()]}
