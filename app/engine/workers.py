"""A ``DataLoader`` with ``num_workers > 0`` loads its batches in the snippet's own process.

Tutorials write ``DataLoader(train_set, batch_size=4, shuffle=True, num_workers=2)`` (the CIFAR-10
classifier). Worker processes cannot be started in the sandbox (its seccomp filter allows no fork),
and a forked worker would run the dataset's code out of the trace's sight anyway. The batches are
the same either way: the sampler and the base seed are drawn in the main process in both cases,
and a map-style dataset's items do not depend on which process fetches them. So the loader keeps
what the snippet gave it (``loader.num_workers`` still reads 2) and only its iterator is the
single-process one; torch's warning about too many workers for the machine is still given.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch.utils.data import dataloader


@contextmanager
def workers_in_process() -> Iterator[None]:
    loader_class = dataloader.DataLoader
    original = loader_class._get_iterator

    def _get_iterator(self: Any) -> Any:
        if self.num_workers == 0:
            return original(self)
        self.check_worker_number_rationality()
        workers = self.num_workers
        self.num_workers = 0  # (the single-process iterator reads it, and refuses any other)
        try:
            return dataloader._SingleProcessDataLoaderIter(self)
        finally:
            self.num_workers = workers

    loader_class._get_iterator = _get_iterator  # type: ignore[method-assign]
    try:
        yield
    finally:
        loader_class._get_iterator = original  # type: ignore[method-assign]
