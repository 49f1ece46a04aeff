"""Exact mid-epoch resumption of the training data stream.

Lightning restores the model, optimizer and loop counters from a checkpoint, but a plain
DataLoader restarts its epoch from the first batch with a fresh shuffle. `ResumableTrainData`
(a callback; the `seqssm` CLI adds it) makes the DataModule's training loader remember the
random state its epoch was shuffled with and how many batches were trained, and on resume
replays that shuffle and skips the trained batches, so a run killed mid-epoch and resumed
with `--ckpt_path last` sees exactly the batches an uninterrupted run sees.

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

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        # runs before ModelCheckpoint's on_train_batch_end (Lightning orders checkpoint callbacks last)
        self.position.batches_done += 1
        self.position.epoch_complete = self.position.batches_done >= trainer.num_training_batches

    def state_dict(self) -> dict[str, Any]:
        return self.position.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Lightning restores callbacks before it builds the train loader, so the first epoch iterator sees this
        self.position.load_state_dict(state_dict)
