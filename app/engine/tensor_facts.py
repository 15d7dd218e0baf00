"""A tensor's fact as one step reads it: shape, strides, version, graph links, its storage's fact and
its values (a slice of the storage's elements when they were read at this step), read with every
property asked of torch once — this runs for every tensor every step reads.

Reading past a storage's end reads freed memory, so a view's extent is checked first; during a
backward pass a storage is known by its bytes only (``ids.tensor_pointer``: making a storage object
there would change what torch does).
"""

from __future__ import annotations

from typing import Any

import torch

from app.engine.cuda_on_cpu import SIMULATING, device_of
from app.engine.ids import tensor_pointer
from app.engine.values import MAX_VALUES, nest


def short_message(error: BaseException) -> str:
    """torch's message up to its first full stop: the fact, without the hint that follows."""
    text = str(error).split("\n")[0]
    head, stop, _ = text.partition(". ")
    return (head + "." if stop else text)[:1000]


def _grad_of(t: torch.Tensor, is_leaf: bool) -> torch.Tensor | None:
    """``.grad``: on leaves, on tensors that retain grad, and on any other tensor the snippet gave
    one. torch warns (or, under a "warnings as errors" filter, raises) when a non-leaf has none;
    the warning is ours, not the snippet's (and goes nowhere: output is discarded while we read)."""
    if is_leaf or t.retains_grad:
        return t.grad
    try:
        return t.grad
    except Exception:  # noqa: BLE001 - the warning raised as an error: it has no grad
        return None


_DTYPE_NAMES: dict[torch.dtype, str] = {}
_STRIDED = torch.strided


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for ``torch.float32``: formatted once per dtype (str() of a dtype is a Python-level
    call, paid at every tensor and storage read otherwise)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def device_name(t: torch.Tensor) -> str:
    # ``t.device`` makes a device object and str() formats it (2.5 µs a read); nearly every tensor
    # here is on the CPU, which a flag says (or cuda:0, simulated there: app.engine.cuda_on_cpu).
    if t.is_cpu:
        return device_of(t) if SIMULATING else "cpu"
    return str(t.device)


def _strides_if_any(t: torch.Tensor) -> list[int]:
    """A sparse COO tensor's strides as torch gives them (``(0, 0)``); CSR and its kin have none."""
    try:
        return list(t.stride())
    except RuntimeError:
        return []


class TensorFacts:
    """The ``Reader``'s reading of tensors and storages (a mixin: the state is the reader's — ``run``,
    ``storages``, ``by_storage``, ``keyed_owners``, the storages' elements read at this step — and its
    ids in meeting order)."""

    def _tensor_fact(self, tid: str, t: torch.Tensor) -> dict[str, Any]:
        passed = self.run.pass_facts
        if passed is not None and not self.run._whole_read:
            known = passed.get(tid)
            if known is not None:
                fact = self._as_passed(tid, t, known)
                if fact is not None:
                    return fact
            fact = self._read_fact(tid, t)
            self._note_passed(tid, t, fact, passed)
            return fact
        return self._read_fact(tid, t)

    # ---- a gradient read again within one backward pass --------------------------------------------
    # A node step reads its gradients, and the next step drops those no node holds any more (they
    # were its roots only): a gradient a node sent is read again when the node it went to runs (a
    # TBackward0's, an AddmmBackward0's). Between two node steps of one pass where no snippet code
    # ran (``SnapshotTaker.pass_facts``: emptied at every other step), only torch's C++ ran, which
    # writes a gradient it made only in place (its version moves): at the same version the tensor,
    # its storage's bytes and their fact read as they read then (a tenth of Adam's node steps).

    def _note_passed(self, tid: str, t: torch.Tensor, fact: dict[str, Any], passed: dict[str, Any]) -> None:
        sid = fact["storage"]
        if fact["version"] is None or sid is None or fact["grad_fn"] is not None or fact["grad"] is not None \
                or fact["requires_grad"] or fact["unavailable"] or tid in self.keyed_owners \
                or tid in self.run.keyed_owner:
            return  # (a leaf's .grad is set with no version bump; a saved copy torch makes afresh is read)
        checked = self.storages.get(sid) or self.run.storages.get(sid)
        if checked is not None:
            passed[tid] = (fact, self.storages.get(sid), checked["nbytes"])

    def _as_passed(self, tid: str, t: torch.Tensor,
                   known: tuple[dict[str, Any], Any, int]) -> dict[str, Any] | None:
        """``tid``'s fact as read earlier in the pass, if it still holds (None: read it). A storage
        known by its bytes only has the size of the first tensor a step meets it through
        (``_bare_nbytes``), which the fact's values were checked against: it must be the same now."""
        fact, storage, checked = known
        if t._version != fact["version"] or tid in self.run.keyed_owner:
            return None
        run = self.run
        base = fact["base"]
        base_object = t._base if base is not None else None
        if base is not None and run.tensor_ids.known(base_object) != base:
            return None
        sid = fact["storage"]
        pointer = tensor_pointer(t)
        if not pointer or run.storage_ids.of_pointer(pointer, t) != sid:
            return None
        dtype_text = fact["dtype"]
        fresh = sid not in self.storages and run.storage_fresh(sid, dtype_text, tid)
        if fresh:
            if storage is None or storage["nbytes"] != self._bare_nbytes(sid, t):
                return None  # (not read with it then, or read at another size)
            nbytes = storage["nbytes"]
        else:
            described = self.storages.get(sid) or run.storages.get(sid)
            nbytes = described["nbytes"] if described is not None else None
        if nbytes != checked:
            return None
        if fresh:
            self.storages[sid] = storage
            if storage["values"] is not None and not (fact["is_conj"] or fact["is_neg"]):
                self._storage_reads[sid] = (t.dtype, storage["values"])
        self._met_on_storage(tid, sid, dtype_text)
        if base is not None:
            self.add_tensor(base, base_object)
        return dict(fact)

    def _read_fact(self, tid: str, t: torch.Tensor) -> dict[str, Any]:
        # (Each property read once here and handed to what needs it: every torch call is a C++ round
        # trip, and every helper a Python call; this runs for every tensor every step reads.)
        unavailable: dict[str, str] = {}
        try:
            strided = t.layout is _STRIDED
            shape = list(t.shape)
            if strided:
                stride, offset = list(t.stride()), t.storage_offset()
            else:
                stride, offset = _strides_if_any(t), 0
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as error:
            # a lazy module's uninitialised parameter, a nested tensor: no shape or strides to read
            strided, shape, stride, offset = False, [], [], 0
            unavailable["shape"] = short_message(error)
        dtype = t.dtype
        dtype_text = _DTYPE_NAMES.get(dtype) or dtype_name(dtype)
        conj, neg = t.is_conj(), t.is_neg()
        storage_id = self._storage(t, tid, dtype, dtype_text, conj or neg) if not unavailable else None
        if storage_id is not None:
            self._met_on_storage(tid, storage_id, dtype_text)
        try:
            version: int | None = t._version
        except RuntimeError:  # inference tensors keep no version counter
            version = None
        try:
            grad_fn = t.grad_fn
            is_leaf = t.is_leaf
        except RuntimeError as error:
            # a view from a multi-output view op (``unbind``, ``split``) whose base was then written
            # in place: torch refuses its node and leaf-ness (it prints ``grad_fn=<Invalid>``)
            grad_fn, is_leaf = None, False
            invalid = short_message(error)
        else:
            invalid = None
        retains_grad = t.retains_grad
        grad = t.grad if is_leaf or retains_grad else _grad_of(t, is_leaf)
        base = t._base
        fact = {
            "shape": shape,
            "dtype": dtype_text,
            "stride": stride,
            "storage_offset": offset,
            "storage": storage_id,
            "requires_grad": t.requires_grad,
            "is_leaf": is_leaf,
            "grad_fn": self.node_id(grad_fn) if grad_fn is not None else None,
            "grad": self.tensor_id(grad) if grad is not None else None,
            "base": self.tensor_id(base) if base is not None else None,
            "version": version,
            "values": None,
            "summary": None,
            "is_view": t._is_view(),
            "retains_grad": retains_grad,
            "is_inference": False,
            "device": "cpu" if t.is_cpu and not SIMULATING else device_name(t),
            "is_conj": conj,
            "is_neg": neg,
            "unavailable": unavailable,
        }
        if not unavailable:
            try:
                # (only a tensor without a version counter can be one: torch refuses ``_version`` of
                # every inference tensor, so the others are spared asking)
                fact["is_inference"] = version is None and t.is_inference()
                numel = t.numel()
                if not strided or self._within_storage(t, storage_id, shape, stride, offset, numel):
                    fact["values"] = self._values(t, storage_id, shape, offset, numel, dtype, conj or neg)
                    if numel > MAX_VALUES:
                        fact["summary"] = self.run.values.summary(t)
                else:
                    unavailable["values"] = "its view reaches past the end of its storage (resized smaller)"
            except (RuntimeError, ValueError, TypeError, NotImplementedError) as error:
                unavailable["values"] = short_message(error)
        if invalid is not None:
            unavailable["grad_fn"] = invalid
        return fact

    def _met_on_storage(self, tid: str, sid: str, dtype_text: str) -> None:
        """``tid`` read on storage ``sid`` (described at this step or before) as ``dtype_text``: listed
        among the storage's tensors, and the storage marked as read through several dtypes when it
        was described through another (``SnapshotTaker.mixed_dtypes``)."""
        on_storage = self.by_storage.get(sid)
        if on_storage is None:
            self.by_storage[sid] = [tid]
        else:
            on_storage.append(tid)
        described = self.storages.get(sid) or self.run.storages.get(sid)
        if described is not None and described["dtype"] != dtype_text:
            self.run.mixed_dtypes.add(sid)

    def _within_storage(self, t: torch.Tensor, storage_id: str | None, shape: list[int], stride: list[int],
                        offset: int, numel: int) -> bool:
        """Reading past a storage's end reads freed memory (a view of a storage ``resize_``-d
        smaller can crash the process): check the extent against the storage's size first, from a
        strided tensor's shape, stride and storage offset as read."""
        if storage_id is None or numel == 0:
            return True
        storage = self.storages.get(storage_id) or self.run.storages.get(storage_id)
        if storage is None:
            return True
        last = offset
        for size, step in zip(shape, stride, strict=True):
            last += (size - 1) * step
        return (last + 1) * t.element_size() <= storage["nbytes"]

    def _values(self, t: torch.Tensor, storage_id: str | None, shape: list[int], offset: int, numel: int,
                dtype: torch.dtype, lazy: bool) -> Any:
        """Its values: a slice of its storage's, when those were read at this step and it lies in
        them in order (``lazy``: conjugate or negative bits, which read differently); the very list
        when it is the whole storage (nothing changes a fact's values once read)."""
        read = self._storage_reads.get(storage_id) if storage_id is not None else None
        if read is not None and 0 < numel <= MAX_VALUES and not lazy and read[0] == dtype \
                and t.is_contiguous():
            elements = read[1]
            if offset == 0 and numel == len(elements):
                return nest(elements, shape)
            flat = elements[offset : offset + numel]
            if len(flat) == numel:
                return nest(flat, shape)
        return self.run.values.tensor_values(t)

    def _storage(self, t: torch.Tensor, tid: str, dtype: torch.dtype, dtype_text: str,
                 lazy: bool) -> str | None:
        """``t``'s storage id, its fact read if it must be (``lazy``: ``t`` has conjugate or negative
        bits, so the elements read, as the memory holds them, are not a slice of its values)."""
        run = self.run
        ids = run.storage_ids
        pointer = tensor_pointer(t) if run.in_backward else 0
        if pointer:  # during a backward pass: known by its bytes only (see ids.tensor_pointer)
            storage, sid = None, ids.of_pointer(pointer, t, self.keyed_owners.get(tid))
        else:
            try:
                storage = t.untyped_storage()
            except (RuntimeError, NotImplementedError, TypeError):  # sparse and other storage-less layouts
                return None
            sid = ids.of_storage(storage)
        if sid not in self.storages and run.storage_fresh(sid, dtype_text, tid):
            if storage is not None and not storage.resizable():
                # memory torch did not allocate (torch.frombuffer over a bytearray, from_numpy,
                # from_dlpack): its owner may write it with no torch call to see — read it again
                # at every step, as the memory handed to Python is (watch: exposed)
                run.volatile.add(sid)
            nbytes = storage.nbytes() if storage is not None else self._bare_nbytes(sid, t)
            element_size = t.element_size()
            elements = run.values.storage_values(t, nbytes, element_size, dtype, lazy)
            if elements is not None and not lazy:
                self._storage_reads[sid] = (dtype, elements)
            self.storages[sid] = {
                "nbytes": nbytes,
                "element_size": element_size,
                "dtype": dtype_text,
                "values": elements,
            }  # (where its bytes are: noted by ids.of_storage already)
        return sid

    def _bare_nbytes(self, sid: str, t: torch.Tensor) -> int:
        """A storage known only by its bytes: its size as last read, else what ``t`` spans of it."""
        known = self.run.storages.get(sid)
        if known is not None:
            return known["nbytes"]
        span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True)) if t.numel() else 0
        return (t.storage_offset() + span) * t.element_size()
