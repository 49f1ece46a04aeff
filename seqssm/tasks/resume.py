"""Exact mid-epoch resumption of the training data stream.

Lightning restores the model, optimizer and loop counters from a checkpoint, but a plain
DataLoader restarts its epoch from the first batch with a fresh shuffle. `ResumableTrainData`
(a callback; the `seqssm` CLI adds it) makes the DataModule's training loader remember the
random state its epoch was shuffled with and how many batches were trained, and on resume
replays that shuffle and skips the trained batches, so a run killed mid-epoch and resumed
with `--ckpt_path last` sees exactly the batches an uninterrupted run sees.

On such a resume Lightning skips `on_train_epoch_start`, which is where its progress bars learn the epoch's
number of batches ("Training: 150/?"); `ResumableTrainData` gives the bar that hook at the first resumed batch.

Exactness needs the loader's shuffle to come from its own `generator` (seqssm DataModules
seed one) or from a sampler ordered by epoch (DistributedSampler under DDP). Skipped batches
are loaded and discarded, which costs data loading time but no training time.
"""

from __future__ import annotations

import inspect
from typing import Any, Iterator

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader


class StreamPosition:
    """Where the training stream is: the generator state its epoch started from and batches trained."""

    def __init__(self) -> None:
        self.epoch_start_state: torch.Tensor | None = None
        self.next_epoch_state: torch.Tensor | None = None  # the generator after this epoch's draws
        self.batches_done = 0
        self.epoch_complete = False
        self.pending: dict[str, Any] | None = None  # loaded from a checkpoint, applied at the next epoch start

    def begin_epoch(self, generator: torch.Generator | None) -> int:
        """Start an epoch: apply a loaded position (returns the batches to skip) and record the start state."""
        skip = 0
        if self.pending is not None:
            if generator is not None and self.pending["generator_state"] is not None:
                generator.set_state(self.pending["generator_state"])
            skip = self.pending["batches_done"]
            self.pending = None
        self.epoch_start_state = generator.get_state() if generator is not None else None
        self.next_epoch_state = None
        self.batches_done = skip
        self.epoch_complete = False
        return skip

    def state_dict(self) -> dict[str, Any]:
        if self.epoch_complete:
            return {"generator_state": self.next_epoch_state, "batches_done": 0}
        return {"generator_state": self.epoch_start_state, "batches_done": self.batches_done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending = dict(state)


class ResumableDataLoader(DataLoader):
    """A DataLoader that follows a StreamPosition: replays the recorded shuffle and skips trained batches."""

    def __init__(self, *args, position: StreamPosition | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.position = position if position is not None else StreamPosition()

    def __iter__(self) -> Iterator[Any]:
        skip = self.position.begin_epoch(self.generator)
        for i, batch in enumerate(super().__iter__()):
            if i == 0 and self.generator is not None:
                # the sampler drew its epoch seed when it produced the first batch: the generator is now
                # where the next epoch starts
                self.position.next_epoch_state = self.generator.get_state()
            if i >= skip:
                yield batch

    # Lightning asks stateful loaders for their state; the position itself is saved and restored by
    # ResumableTrainData, because Lightning may create the epoch iterator before restoring loader states.
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to do: see ResumableTrainData.load_state_dict."""


# DataLoader.__init__ arguments carried over when a plain loader is made resumable.
_LOADER_ARGS = [n for n in inspect.signature(DataLoader.__init__).parameters
                if n not in ("self", "dataset", "batch_size", "shuffle", "sampler", "drop_last", "batch_sampler")]


def make_resumable(loader: DataLoader, position: StreamPosition) -> ResumableDataLoader:
    """The same loader (dataset, batching, workers, generator) as a ResumableDataLoader."""
    kwargs = {name: getattr(loader, name) for name in _LOADER_ARGS if hasattr(loader, name)}
    if loader.batch_size is not None:
        # plain batching: pass sampler and batch size, so Lightning can swap in a DistributedSampler
        kwargs.update(sampler=loader.sampler, batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_sampler is not None:
        kwargs["batch_sampler"] = loader.batch_sampler
    else:
        kwargs.update(batch_size=None, sampler=loader.sampler)
    return ResumableDataLoader(loader.dataset, position=position, **kwargs)


class ResumableTrainData(L.Callback):
    """Makes the DataModule's train loader resumable mid-epoch; saves and restores its position."""

    def __init__(self) -> None:
        self.position = StreamPosition()
        self._wrapped: set[int] = set()
        self._first_batch = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        datamodule = trainer.datamodule
        if stage != "fit" or datamodule is None or id(datamodule) in self._wrapped:
            return
        original = datamodule.train_dataloader

        def train_dataloader() -> Any:
            loader = original()
            if not isinstance(loader, DataLoader):
                rank_zero_warn(f"ResumableTrainData: {type(loader).__name__} is not a DataLoader; mid-epoch "
                               "resumption will restart the epoch's data")
                return loader
            return make_resumable(loader, self.position)

        # instance attribute, so only this run's DataModule is affected
        datamodule.train_dataloader = train_dataloader
        self._wrapped.add(id(datamodule))

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._first_batch = True

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        # A first batch past index 0 continues an epoch begun before the checkpoint: Lightning does not start that
        # epoch again, so the progress bar would show no total and no epoch number without its epoch-start hook.
        resumed_mid_epoch, self._first_batch = self._first_batch and batch_idx > 0, False
        if resumed_mid_epoch and trainer.progress_bar_callback is not None:
            trainer.progress_bar_callback.on_train_epoch_start(trainer, pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        # runs before ModelCheckpoint's on_train_batch_end (Lightning orders checkpoint callbacks last)
        self.position.batches_done += 1
        self.position.epoch_complete = self.position.batches_done >= trainer.num_training_batches

    def state_dict(self) -> dict[str, Any]:
        return self.position.state_dict()

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # called before Lightning restores its loops from the same dict, so the loop state can be settled first
        position = (checkpoint.get("callbacks") or {}).get(self.state_key)
        loops = (checkpoint.get("loops") or {}).get("fit_loop")
        if position is not None and loops is not None:
            settle_loop_state(loops, mid_epoch=position["batches_done"] > 0)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Lightning restores callbacks before it builds the train loader, so the first epoch iterator sees this
        self.position.load_state_dict(state_dict)


def settle_loop_state(fit_loop: dict[str, Any], mid_epoch: bool) -> None:
    """Rewrite Lightning's saved fit-loop progress so that resuming continues where the data stream stands.

    Two states that Lightning resumes wrongly (Lightning 2.6), both of an epoch whose training is over
    (`processed == ready` in the epoch progress):
    - the data stream is mid-epoch: the run stopped at `max_steps` (or `should_stop`) inside an epoch, and
      the checkpoint, written after that, marks the epoch finished; resuming with a larger `max_steps` would
      start the next epoch or, at `max_epochs`, train nothing. Rewritten to the state of a checkpoint taken
      at that step's `on_train_batch_end`, which Lightning resumes mid-epoch.
    - the data stream is at an epoch boundary: with `max_steps` set, Lightning treats this as a restart
      inside the finished epoch, counts the epoch twice and trains no batch of the next one. Rewritten to a
      fully finished epoch whose per-epoch counters are zero, so the next epoch starts from its first batch.
    """
    epochs = fit_loop["epoch_progress"]
    if epochs["total"]["processed"] != epochs["total"]["ready"]:
        return  # mid-epoch or mid-validation checkpoint: Lightning's own restart handles it
    if mid_epoch:
        for part in ("total", "current"):
            epochs[part]["processed"] = epochs[part]["completed"] = epochs[part]["ready"] - 1
            batches = fit_loop["epoch_loop.batch_progress"][part]
            batches["completed"] = batches["processed"] - 1
        fit_loop["epoch_loop.batch_progress"]["is_last_batch"] = False
        # counted after on_train_batch_end, where a mid-epoch checkpoint is taken
        fit_loop["epoch_loop.state_dict"]["_batches_that_stepped"] -= 1
    else:
        for part in ("total", "current"):
            epochs[part]["completed"] = epochs[part]["processed"]
        for key, progress in fit_loop.items():
            if key.startswith("epoch_loop.") and not key.startswith("epoch_loop.val_loop."):
                _zero_current(progress)
        fit_loop["epoch_loop.batch_progress"]["is_last_batch"] = False


def _zero_current(progress: Any) -> None:
    """Zero every `current` counter in a (nested) Lightning progress state dict."""
    if not isinstance(progress, dict):
        return
    for key, value in progress.items():
        if key == "current" and isinstance(value, dict):
            progress[key] = dict.fromkeys(value, 0)
        else:
            _zero_current(value)
