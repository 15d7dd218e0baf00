"""A ``DataLoader`` with ``num_workers > 0`` loads its batches in the snippet's own process, as its
worker processes would have loaded them.

Tutorials write ``DataLoader(train_set, batch_size=4, shuffle=True, num_workers=2)`` (the CIFAR-10
classifier). Worker processes cannot be started in the sandbox (its seccomp filter allows no fork),
and a forked worker would run the dataset's code out of the trace's sight anyway. So while the run
lasts, torch's multiprocessing iterator is ``InProcessWorkers``: torch's own ``_get_iterator`` still
picks it (and warns about too many workers from its own line), and it keeps what makes a worker's
batches what they are in a plain run:

* each worker is a state of its own: torch's, Python's and numpy's random generators seeded as
  torch seeds a worker (``base_seed + id``, numpy's from both), ``get_worker_info()`` answering its
  id, ``worker_init_fn`` run once in it, and an iterable dataset iterated once per worker. That state
  is put in place while the worker fetches a batch and put away after: the dataset's random
  augmentations draw what the worker would draw, and the snippet's own generators do not move;
* batch ``k`` goes to the next active worker in turn (``k % num_workers`` for a map-style dataset), and
  an iterable dataset's worker that runs out drops out of the turn, as torch's main process assigns
  them (results in the order asked for); persistent workers keep their state across epochs, and
  start the turn at worker 0 again;
* what a worker returns reaches the main process as torch's pickling hands it over: rebuilt, each
  tensor a new one (version 1, made with ``set_``) over memory apart from the worker's dataset;
* an error in a worker is re-raised as torch re-raises it ("Caught ValueError in DataLoader worker
  process 0. Original Traceback ...").

A worker stacks a batch of tensors into shared memory, which the sandbox has none of: while the run
lasts a new "shared" storage is the process's own memory (the batch, and its version, the same).

What it does not reproduce: a worker's copy of the dataset (a dataset that changes itself while
fetching changes the snippet's one here), and the timing of a real pool.
"""

from __future__ import annotations

import inspect
import io
import itertools
import pickle
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch._utils import ExceptionWrapper
from torch.storage import _StorageBase
from torch.utils.data import _utils, dataloader
from torch.utils.data._utils import worker as worker_module


class _Worker:
    """One worker's state: its generators, its info, its fetcher (``_worker_loop``'s set-up)."""

    def __init__(self, loader_iter: InProcessWorkers, worker_id: int) -> None:
        self.id = worker_id
        self.seed = loader_iter._base_seed + worker_id
        self.info = worker_module.WorkerInfo(id=worker_id, num_workers=loader_iter._num_workers,
                                             seed=self.seed, dataset=loader_iter._dataset)
        self._torch_state = _seeded_torch_state(self.seed)
        self._random_state = random.Random(self.seed).getstate()
        numpy_seed = worker_module._generate_state(loader_iter._base_seed, worker_id)
        self._numpy_state = np.random.RandomState(numpy_seed).get_state()
        self._iter = loader_iter
        self.fetcher: Any = None
        self.init_error: ExceptionWrapper | None = None
        with self.running():
            try:
                if loader_iter._worker_init_fn is not None:
                    loader_iter._worker_init_fn(worker_id)
                self.fetcher = self.new_fetcher()
            except Exception:  # noqa: BLE001 - torch hands it to the first batch asked of the worker
                self.init_error = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")

    def new_fetcher(self) -> Any:
        it = self._iter
        return dataloader._DatasetKind.create_fetcher(it._dataset_kind, it._dataset, it._auto_collation,
                                                      it._collate_fn, it._drop_last)

    @contextmanager
    def running(self) -> Iterator[None]:
        """The worker's state in place (the main process's put aside), and put away after."""
        main = torch.default_generator.get_state(), random.getstate(), np.random.get_state()
        info = worker_module._worker_info
        torch.default_generator.set_state(self._torch_state)
        random.setstate(self._random_state)
        np.random.set_state(self._numpy_state)
        worker_module._worker_info = self.info
        try:
            yield
        finally:
            self._torch_state = torch.default_generator.get_state()
            self._random_state = random.getstate()
            self._numpy_state = np.random.get_state()
            worker_module._worker_info = info
            torch.default_generator.set_state(main[0])
            random.setstate(main[1])
            np.random.set_state(main[2])

    def fetch(self, index: Any) -> Any:
        """A batch, an ``ExceptionWrapper`` of the worker's error, or ``StopIteration`` (the class)
        when an iterable dataset's worker ran out."""
        if self.init_error is not None:
            error, self.init_error = self.init_error, None
            return error
        with self.running():
            try:
                return _WORKER_FETCH(self.fetcher, index)
            except StopIteration:
                if self._iter._dataset_kind == dataloader._DatasetKind.Iterable:
                    return StopIteration
                return self._error()
            except Exception:  # noqa: BLE001 - re-raised in the main process, as torch does
                return self._error()

    def _error(self) -> ExceptionWrapper:
        """The error being handled, as a worker sends it: its traceback from the worker loop's line on
        (this frame left out)."""
        error_type, error, traceback = sys.exc_info()
        return ExceptionWrapper((error_type, error, traceback.tb_next if traceback else None),
                                where=f"in DataLoader worker process {self.id}")


def _worker_fetch() -> Any:
    """``fetcher.fetch(index)`` called from a frame that is torch's worker loop's line that calls it
    (its file, line, name and columns): a worker's error reads as in a plain run ("File .../worker.py",
    line ..., in _worker_loop"), its source line and markers shown by Python from torch's file."""
    try:
        lines, start = inspect.getsourcelines(worker_module._worker_loop)
    except (OSError, TypeError):
        return lambda fetcher, index: fetcher.fetch(index)
    at = next((i for i, line in enumerate(lines) if line.lstrip().startswith("data = fetcher.fetch(index)")),
              None)
    if at is None or at == 0:
        return lambda fetcher, index: fetcher.fetch(index)
    line = lines[at].rstrip("\n")
    source = "\n" * (start + at - 2) + "def _worker_loop(fetcher, index):\n" + line + "\n" + \
        line[: len(line) - len(line.lstrip())] + "return data\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, worker_module.__file__, "exec"), namespace)  # noqa: S102 - our own two lines
    return namespace["_worker_loop"]


_WORKER_FETCH = _worker_fetch()


def _seeded_torch_state(seed: int) -> torch.Tensor:
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator.get_state()


class InProcessWorkers(dataloader._BaseDataLoaderIter):
    """``_MultiProcessingDataLoaderIter`` with its workers in this process (see the module's note)."""

    def __init__(self, loader: Any) -> None:
        super().__init__(loader)
        self._worker_init_fn = loader.worker_init_fn
        self._workers = [_Worker(self, i) for i in range(self._num_workers)]
        self._active = [True] * self._num_workers
        self._turn = itertools.cycle(range(self._num_workers))

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        super()._reset(loader, first_iter)
        # persistent workers: a new epoch starts the turn at worker 0, each iterable worker anew
        self._turn = itertools.cycle(range(self._num_workers))
        self._active = [True] * self._num_workers
        if not first_iter:
            for worker in self._workers:
                with worker.running():
                    worker.fetcher = worker.new_fetcher()

    def _next_data(self) -> Any:
        while any(self._active):
            index = self._next_index()  # may raise StopIteration
            worker = next(w for w in (self._workers[next(self._turn)] for _ in self._workers)
                          if self._active[w.id])
            data = worker.fetch(index)
            if data is StopIteration:
                self._active[worker.id] = False
                continue
            if isinstance(data, ExceptionWrapper):
                data.reraise()
            data = received(data)
            if self._pin_memory:
                data = _utils.pin_memory.pin_memory(data, self._pin_memory_device)
            return data
        raise StopIteration


class _Sender(pickle.Pickler):
    """A worker's batch as it goes to the main process: pickled, each plain tensor sent by reference
    (torch sends its storage's shared memory)."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.tensors: list[torch.Tensor] = []

    def persistent_id(self, obj: Any) -> int | None:
        if type(obj) in (torch.Tensor, torch.nn.Parameter) and obj.layout == torch.strided and obj.is_cpu:
            self.tensors.append(obj)
            return len(self.tensors) - 1
        return None


class _Receiver(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, tensors: list[torch.Tensor]) -> None:
        super().__init__(file)
        self.tensors = tensors

    def persistent_load(self, pid: Any) -> torch.Tensor:
        return self.tensors[pid]


def received(data: Any) -> Any:
    """``data`` as the main process receives it from a worker (``torch.multiprocessing.reductions``):
    rebuilt by unpickling, each tensor a new one over memory apart from the worker's objects (its
    dataset's tensors), made with ``set_`` as torch rebuilds it (so at version 1), and torch's refusal
    of a non-leaf that requires grad. What cannot be pickled is handed over as it is."""
    buffer = io.BytesIO()
    sender = _Sender(buffer)
    try:
        sender.dump(data)
    except (pickle.PicklingError, TypeError, AttributeError):
        return data
    storages: dict[int, Any] = {}  # one storage received once, as torch's shared cache does
    rebuilt = []
    for t in sender.tensors:
        if t.requires_grad and not t.is_leaf:
            raise RuntimeError(_NON_LEAF)
        source = t.untyped_storage()
        storage = storages.get(source.data_ptr())
        if storage is None:
            storage = storages[source.data_ptr()] = source.clone()
        with torch.no_grad():
            copy = torch.empty((0,), dtype=t.dtype).set_(storage, t.storage_offset(), t.size(), t.stride())
        if type(t) is torch.nn.Parameter:
            copy = torch.nn.Parameter(copy, requires_grad=t.requires_grad)
        else:
            copy.requires_grad = t.requires_grad
        rebuilt.append(copy)
    buffer.seek(0)
    return _Receiver(buffer, rebuilt).load()


_NON_LEAF = ("Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd does not "
             "support crossing process boundaries.  If you just want to transfer the data, call detach() "
             "on the tensor before serializing (e.g., putting it on the queue).")


def _new_unshared(cls: Any, size: int, *, device: Any = "cpu") -> Any:
    """A storage of the size asked, in this process's memory: a worker's collate stacks a batch into
    a new shared-memory storage (``collate_tensor_fn``), which the sandbox has none of; the batch is
    the same (the stack into it is still its version 1), only not shared with another process."""
    return cls(size, device=device)


@contextmanager
def workers_in_process() -> Iterator[None]:
    original = dataloader._MultiProcessingDataLoaderIter
    new_shared = vars(_StorageBase)["_new_shared"]
    dataloader._MultiProcessingDataLoaderIter = InProcessWorkers  # type: ignore[misc, assignment]
    _StorageBase._new_shared = classmethod(_new_unshared)  # type: ignore[assignment, method-assign]
    try:
        yield
    finally:
        dataloader._MultiProcessingDataLoaderIter = original  # type: ignore[misc]
        _StorageBase._new_shared = new_shared  # type: ignore[method-assign]
        worker_module._worker_info = None
