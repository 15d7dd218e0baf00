"""Code written for a GPU, run on the CPU: ``EngineLimits(cuda_on_cpu=True)`` (issue 24, 5).

The article's readers write ``.cuda()``, ``.to("cuda")``, ``device="cuda"``. With this option such a
snippet runs unchanged: what it puts on ``cuda`` is made on the CPU and shown as what it asked for —
device ``cuda:0`` in the trace (``device_of``, read by ``app.engine.reader``) and to the code itself
(``x.device``, ``x.is_cuda``, ``print(x)``), while the trace says the run was simulated
(``DeltaTrace.cuda_on_cpu``) and the page says so beside it.

``CudaOnCpu`` is a ``TorchFunctionMode`` above the engine's own (``app.engine.watch.Touches``): it sees
every torch call of the run, rewrites a ``cuda`` device to the CPU, and remembers which tensors live on
the simulated device (weakly, by object; an op's new tensors are on its inputs' device, as in torch).
Moving between the CPU and the simulated device copies, as a real transfer does (``x.cuda()`` is a new
tensor with a ``ToCopyBackward0``), and mixing them in one op fails as torch fails. Tensors torch makes
in C++ (gradients, saved outputs) take the device of what they belong to: a gradient its tensor's, a
tensor on a simulated tensor's memory that one's, a tensor made during a backward pass of simulated
tensors the simulated device, one an op kept in its graph (a GRU's saved copies) its graph's, a
torch.func wrapper (and the value it hands out unwrapped) the device of what it wraps.
While it runs, the parts of ``torch.cuda`` (and ``torch.accelerator``) that GPU code asks about
answer as one device would; autocast on ``cuda`` runs CPU autocast in ``float16`` (CUDA's default);
random numbers come from the CPU generator (``torch.cuda.manual_seed`` seeds it). What it does not
simulate fails with a message that says so (``app.run_errors``).
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _device
from torch.utils.weak import WeakIdKeyDictionary

from app.engine import cuda_answers
from app.engine.calls import call_as_caller
from app.engine.ids import tensor_pointer
from app.engine.writes import tensors_in
from app.trace.gpu import round_size

SIMULATED = torch.device("cuda", 0)
SIMULATED_NAME = "cuda:0"
# torch's own words where a simulated tensor meets what only the CPU allows.
MIXED = "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
TO_NUMPY = ("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host "
            "memory first.")
# Calls that take tensors on both devices in torch too: copies, indexing, shapes of another tensor,
# lengths that must stay on the CPU (packed sequences, CTC), lists of tensors per device (foreach).
MIXING_ALLOWED = frozenset({
    "copy_", "__setitem__", "__getitem__", "index_put_", "index_put", "set_", "new_tensor", "expand_as",
    "view_as", "reshape_as", "broadcast_tensors", "__repr__", "__format__", "__deepcopy__", "__reduce_ex__",
    "_pack_padded_sequence", "pack_padded_sequence", "_pad_packed_sequence", "pad_packed_sequence",
    "ctc_loss", "backward", "grad", "is_same_size", "is_set_to", "__get__", "__set__",
    "_has_compatible_shallow_copy_type",
})
# Getters whose tensor shares what it is read from: on its device.
SHARING_GETTERS = frozenset({"data", "grad", "_base", "real", "imag", "T", "mT", "H", "mH"})

_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_unwrapped = torch._C._functorch.get_unwrapped
_GRAPH_WALK = 64  # nodes walked to find a device for a tensor made in C++ (``_graph_on_cuda``)
SIMULATING: list[CudaOnCpu] = []  # the simulation of the run in progress, if any (read on hot paths)
_INHERITED = object()


def device_of(t: torch.Tensor) -> str:
    """The device a CPU tensor is shown on: ``cuda:0`` for one the run put on the simulated device."""
    if SIMULATING and SIMULATING[-1].on_cuda(t):
        return SIMULATED_NAME
    return "cpu"


class CudaOnCpu(TorchFunctionMode):
    """The simulated device: which tensors are on it, and every torch call rewritten for it."""

    def __init__(self, allocated: Callable[[], int]) -> None:
        super().__init__()
        self.allocated = allocated  # torch.cuda.memory_allocated(): see simulation()
        self._devices = WeakIdKeyDictionary()  # tensor -> True: on the simulated device
        self._pointers: dict[int, weakref.ref] = {}  # memory of simulated tensors -> one of them
        self._pinned = WeakIdKeyDictionary()
        # graph node (its sequence number) -> whether its forward output is on the simulated device:
        # the device of the gradients that flow into it in a backward pass
        self._nodes: dict[int, bool] = {}
        self._backward_on_cuda = False  # a backward pass of simulated tensors runs
        self._special: dict[Any, Callable[[Any, tuple, dict], Any]] = {
            torch.Tensor.to: self._to, torch.Tensor.cuda: self._cuda, torch.Tensor.cpu: self._cpu,
            torch.Tensor.type_as: self._type_as, torch.Tensor.pin_memory: self._pin_memory,
            torch.Tensor.is_pinned: self._is_pinned, torch.Tensor.numpy: self._numpy,
            torch.Tensor.__array__: self._numpy, torch.Tensor.get_device: self._get_device,
            torch.Tensor.__repr__: self._repr, torch.Tensor.__format__: self._format,
            torch.Tensor.backward: self._backward, torch.autograd.backward: self._backward,
            torch.autograd.grad: self._backward,
        }

    # -- which device ----------------------------------------------------------------------------
    def on_cuda(self, t: torch.Tensor) -> bool:
        """Whether ``t`` is on the simulated device; decided once for a tensor torch made in C++."""
        known = self._devices.get(t)
        if known is None:
            with torch._C.DisableTorchFunction():
                known = self._backward_on_cuda or self._shares_simulated_memory(t) or self._graph_on_cuda(t) \
                    or self._wrapped_on_cuda(t)
            self.note(t, known)
        return known

    def _wrapped_on_cuda(self, t: torch.Tensor) -> bool:
        """A torch.func transform's wrapper (``grad``'s, ``vmap``'s batched tensor) is made in C++ and
        has no memory of its own: it is on the device of the tensor it wraps."""
        if not _is_wrapped(t):
            return False
        try:
            return self.on_cuda(_unwrapped(t))
        except RuntimeError:  # a dead wrapper (its transform has returned)
            return False

    def _graph_on_cuda(self, t: torch.Tensor) -> bool:
        """A tensor an op made inside itself and kept in its graph (a GRU's saved copies) is on the
        device of the nearest tensor of that graph whose device is known — whenever it is first
        read: the memory it shares with a result may have been freed by then, and a snapshot that
        reads it later must say what one that read it at once says."""
        try:
            start = t.grad_fn
        except RuntimeError:  # a multi-output view whose base was written since: no node
            return False
        queue, seen = [start], set()
        while queue and len(seen) < _GRAPH_WALK:
            node = queue.pop(0)
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            variable = getattr(node, "variable", None)  # an AccumulateGrad: its leaf's device
            if isinstance(variable, torch.Tensor):
                return bool(self._devices.get(variable, False))
            try:
                known = self._nodes.get(node._sequence_nr())
            except (AttributeError, RuntimeError):
                known = None
            if known is not None:
                return known
            queue.extend(fn for fn, _ in node.next_functions)
        return False

    def _shares_simulated_memory(self, t: torch.Tensor) -> bool:
        pointer = tensor_pointer(t)
        owner = self._pointers.get(pointer) if pointer else None
        alive = owner() if owner is not None else None
        return alive is not None and tensor_pointer(alive) == pointer

    def note(self, t: torch.Tensor, on_cuda: bool) -> None:
        """``t`` is on the simulated device (or not), from now on."""
        self._devices[t] = on_cuda
        if on_cuda:
            with torch._C.DisableTorchFunction():
                pointer = tensor_pointer(t) if t.is_cpu else 0
                # a torch.func wrapper's value, which its transform hands out unwrapped at its end
                inner = _unwrapped(t) if _is_wrapped(t) else None
            if pointer:
                self._pointers[pointer] = weakref.ref(t)
            if inner is not None and inner not in self._devices:
                self.note(inner, True)

    def _note_new(self, result: Any, on_cuda: bool, depth: int = 0) -> None:
        """What a call returned: tensors not met before are on ``on_cuda``'s device (and the gradients
        that will flow into the node that made one, on its device)."""
        if isinstance(result, torch.Tensor):
            if result not in self._devices:
                self.note(result, on_cuda)
            with torch._C.DisableTorchFunction():
                try:
                    node = result.grad_fn
                except RuntimeError:  # a multi-output view whose base was written since: no node
                    node = None
                if node is not None:
                    self._nodes[node._sequence_nr()] = self._devices[result]
        elif isinstance(result, list | tuple) and depth < 2:
            for item in result:
                self._note_new(item, on_cuda, depth + 1)

    def _target(self, device: Any) -> bool:
        """Whether a device argument names the (one) simulated cuda device."""
        if isinstance(device, int) and not isinstance(device, bool):
            device = torch.device("cuda", device)
        found = torch.device(device)
        if found.type != "cuda":
            return False
        if found.index not in (None, 0):
            raise RuntimeError("CUDA error: invalid device ordinal")
        return True

    # -- every call ------------------------------------------------------------------------------
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        special = self._special.get(func)
        if special is not None:
            return special(func, args, kwargs)
        name = getattr(func, "__name__", "")
        if name in ("__get__", "__set__"):
            return self._descriptor(func, name, args, kwargs)
        device = kwargs.get("device")
        if device is None and _device.CURRENT_DEVICE is not None and func in _device._device_constructors():
            # torch.set_default_device("cuda") / `with torch.device("cuda"):`: torch's DeviceContext
            # sits at the bottom of the mode stack, below this one, and would hand the factory "cuda"
            # after this mode had passed it by: name the default device here, where it is simulated.
            device = _device.CURRENT_DEVICE
        if device is not None:
            on_cuda = self._target(device)
            kwargs = {**kwargs, "device": "cpu" if on_cuda else device}
        else:
            on_cuda = self._inputs_on_cuda(name, args, kwargs)
        result = _call(func, args, kwargs)
        self._note_new(result, on_cuda)
        return result

    def _inputs_on_cuda(self, name: str, args: tuple, kwargs: dict) -> bool:
        """Whether a call's tensors are on the simulated device; mixed with CPU tensors (other than
        0-dim ones, which torch moves), it fails as torch fails."""
        on_cuda = on_cpu = False
        for t in tensors_in((*args, *kwargs.values())):
            if self.on_cuda(t):
                on_cuda = True
            else:
                with torch._C.DisableTorchFunction():
                    on_cpu = on_cpu or (t.is_cpu and t.dim() > 0)
        if on_cuda and on_cpu and name not in MIXING_ALLOWED and not name.startswith("_foreach"):
            raise RuntimeError(MIXED)
        return on_cuda

    def _descriptor(self, func: Any, name: str, args: tuple, kwargs: dict) -> Any:
        descriptor = getattr(getattr(func, "__self__", None), "__name__", "")
        t = args[0] if args else None
        if not isinstance(t, torch.Tensor):
            return _call(func, args, kwargs)
        if name == "__set__":
            result = _call(func, args, kwargs)
            if descriptor == "data":  # module.to("cuda") swaps each parameter's data this way
                self.note(t, self.on_cuda(args[1]))
            return result
        on_cuda = self.on_cuda(t)
        if descriptor == "device":
            return SIMULATED if on_cuda else _call(func, args, kwargs)
        if descriptor == "is_cuda":
            return on_cuda or _call(func, args, kwargs)
        if descriptor == "is_cpu":
            return not on_cuda and _call(func, args, kwargs)
        result = _call(func, args, kwargs)
        if descriptor in SHARING_GETTERS:
            self._note_new(result, on_cuda)
        return result

    # -- moves between devices -------------------------------------------------------------------
    def _move(self, t: torch.Tensor, to_cuda: bool, copy: bool = False, **options: Any) -> torch.Tensor:
        """``t`` on the CPU or the simulated device: itself when it is there already (unless ``copy``
        or a dtype change), else a copy, as a real transfer makes one."""
        options = {k: v for k, v in options.items() if v is not None}
        from_cuda = self.on_cuda(t)
        if to_cuda == from_cuda and not copy:
            result = _call(torch.Tensor.to, (t,), options)
        else:
            result = _call(torch.Tensor.to, (t, "cpu"), {**options, "copy": True})
        self._note_new(result, to_cuda)
        if to_cuda != from_cuda and result is not t:
            self._copy_gradient_back(result, from_cuda)
        return result

    def _copy_gradient_back(self, moved: torch.Tensor, source_on_cuda: bool) -> None:
        """A transfer's backward sends the gradient to the other device: a copy there, as on a GPU
        (here torch's ``ToCopyBackward0`` would hand on the very tensor it received, the CPU being
        both sides). The hook changes no value, and is not the snippet's (the engine's hook watch,
        a profile function, does not see it registered)."""
        with torch._C.DisableTorchFunction():
            node = moved.grad_fn
        if node is None:
            return

        def copy_back(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> tuple[Any, ...]:
            with torch._C.DisableTorchFunction():
                copies = tuple(g.clone() if isinstance(g, torch.Tensor) else g for g in grad_inputs)
            for copy in copies:
                if isinstance(copy, torch.Tensor):
                    self.note(copy, source_on_cuda)
            return copies

        profile = sys.getprofile()
        sys.setprofile(None)
        try:
            node.register_hook(copy_back)
        finally:
            sys.setprofile(profile)

    def _to(self, func: Any, args: tuple, kwargs: dict) -> Any:
        t, rest = args[0], args[1:]
        other = next((a for a in (*rest, kwargs.get("other")) if isinstance(a, torch.Tensor)), None)
        parsed = {k: v for k, v in kwargs.items() if k != "copy"}
        with torch._C.DisableTorchFunction():
            device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*rest, **parsed)
        if other is not None:
            to_cuda = self.on_cuda(other)
        elif device is not None:
            to_cuda = self._target(device)
        else:
            result = _call(func, args, kwargs)  # only a dtype: where it is
            self._note_new(result, self.on_cuda(t))
            return result
        return self._move(t, to_cuda, bool(kwargs.get("copy", False)), dtype=dtype, non_blocking=non_blocking,
                          memory_format=memory_format)

    def _cuda(self, func: Any, args: tuple, kwargs: dict) -> Any:
        device = args[1] if len(args) > 1 else kwargs.get("device")
        if device is not None and not self._target(device):
            raise RuntimeError(f"Invalid device, must be cuda device, got {device}")
        return self._move(args[0], True, non_blocking=kwargs.get("non_blocking"),
                          memory_format=kwargs.get("memory_format"))

    def _cpu(self, func: Any, args: tuple, kwargs: dict) -> Any:
        if not self.on_cuda(args[0]):
            return _call(func, args, kwargs)
        return self._move(args[0], False, memory_format=kwargs.get("memory_format"))

    def _type_as(self, func: Any, args: tuple, kwargs: dict) -> Any:
        other = args[1] if len(args) > 1 else kwargs["other"]
        return self._move(args[0], self.on_cuda(other), dtype=other.dtype)

    def _pin_memory(self, func: Any, args: tuple, kwargs: dict) -> Any:
        t = args[0]
        if self.on_cuda(t):
            raise RuntimeError("cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned")
        if self._pinned.get(t):
            return t
        pinned = _call(torch.Tensor.clone, (t,), {})  # page-locked memory is still the CPU's
        self.note(pinned, False)
        self._pinned[pinned] = True
        return pinned

    def _is_pinned(self, func: Any, args: tuple, kwargs: dict) -> bool:
        return bool(self._pinned.get(args[0]))

    def _numpy(self, func: Any, args: tuple, kwargs: dict) -> Any:
        if self.on_cuda(args[0]):
            raise TypeError(TO_NUMPY)
        return _call(func, args, kwargs)

    def _get_device(self, func: Any, args: tuple, kwargs: dict) -> int:
        return 0 if self.on_cuda(args[0]) else _call(func, args, kwargs)

    # -- printing: torch's own formatting, which asks the tensor its device ---------------------------
    def _repr(self, func: Any, args: tuple, kwargs: dict) -> str:
        if not self.on_cuda(args[0]):
            return _call(func, args, kwargs)
        with self:  # torch's formatting reads .device: let it read the simulated one
            return torch._tensor_str._str(args[0], tensor_contents=kwargs.get("tensor_contents"))

    def _format(self, func: Any, args: tuple, kwargs: dict) -> str:
        t, spec = args
        with torch._C.DisableTorchFunction():
            scalar = t.dim() == 0 and not t.is_meta and type(t) is torch.Tensor
        if scalar or not self.on_cuda(t):
            return _call(func, args, kwargs)
        with self:
            return object.__format__(t, spec)  # str(t): our _repr

    # -- backward: what torch makes in it belongs to the pass's device --------------------------------
    def _backward(self, func: Any, args: tuple, kwargs: dict) -> Any:
        roots = args[0] if args else kwargs.get("tensors", kwargs.get("outputs"))
        roots = (roots,) if isinstance(roots, torch.Tensor) else tuple(roots or ())
        before = self._backward_on_cuda
        self._backward_on_cuda = any(isinstance(r, torch.Tensor) and self.on_cuda(r) for r in roots)
        try:
            return _call(func, args, kwargs)
        finally:
            self._backward_on_cuda = before
            self._adopt_gradients()

    def node_ran(self, node: Any, received: tuple[Any, ...], sent: tuple[Any, ...]) -> None:
        """One node of a backward pass ran (``app.engine.backward.NodeRan``): the gradients it received
        are on its forward output's device, each it sent on the device of the node it goes to (a
        leaf's own, for an ``AccumulateGrad``). Only a transfer's node (``ToCopyBackward0``) sends
        them to another device than it received them on."""
        with torch._C.DisableTorchFunction():
            own = self._node_device(node, None)
            if own is None:
                known = [self._devices.get(g) for g in received if isinstance(g, torch.Tensor)]
                own = next((k for k in known if k is not None), self._backward_on_cuda)
            for grad in received:
                if isinstance(grad, torch.Tensor) and grad not in self._devices:
                    self.note(grad, own)
            for (target, _), grad in zip(node.next_functions, sent, strict=False):
                if isinstance(grad, torch.Tensor) and grad not in self._devices:
                    self.note(grad, self._node_device(target, own))
            leaf = getattr(node, "variable", None)  # an AccumulateGrad: the .grad it wrote (or cloned)
            grad = leaf.grad if isinstance(leaf, torch.Tensor) else None
            if grad is not None and grad not in self._devices:
                self.note(grad, own)

    def _node_device(self, node: Any, default: bool | None) -> bool | None:
        if node is None:
            return default
        variable = getattr(node, "variable", None)  # an AccumulateGrad: its leaf's device
        if isinstance(variable, torch.Tensor):
            return self.on_cuda(variable)
        try:
            return self._nodes.get(node._sequence_nr(), default)
        except (AttributeError, RuntimeError):
            return default

    def _adopt_gradients(self) -> None:
        """A tensor's ``.grad`` is on its device (torch makes it in C++; a pass whose nodes had no
        steps, past the step limit, left it unread)."""
        with torch._C.DisableTorchFunction():
            for t, on_cuda in list(self._devices.items()):
                try:
                    if not (t.requires_grad and (t.is_leaf or t.retains_grad)):
                        continue  # (a non-leaf's .grad is never written, and reading it warns)
                except RuntimeError:  # a multi-output view whose base was written since: no leaf
                    continue
                grad = t.grad
                if grad is not None and grad not in self._devices:
                    self.note(grad, on_cuda)


def node_ran(node: Any, received: tuple[Any, ...], sent: tuple[Any, ...]) -> None:
    """The engine's word that a backward node ran (``CudaOnCpu.node_ran``); nothing when not simulating."""
    if SIMULATING:
        SIMULATING[-1].node_ran(node, received, sent)


def _call(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func`` called as the snippet called it: from its line, so that torch's warnings name it (and
    the engine's own mode below this one sees the snippet's frame)."""
    return call_as_caller(_caller(), func, args, kwargs)


_OWN_FILES = (__file__, torch.overrides.__file__)  # this mode's frames, and torch's dispatch to it


def _caller() -> Any:
    frame = sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_filename in _OWN_FILES:
        frame = frame.f_back
    return frame


@contextlib.contextmanager
def simulation(allocated: Callable[[], int]) -> Iterator[CudaOnCpu]:
    """cuda mapped to the CPU while the block runs (enter it inside the engine's own mode)."""
    mode = CudaOnCpu(allocated)
    saved: dict[tuple[Any, str], Any] = {}
    try:
        for (owner, name), replacement in cuda_answers.patches(mode).items():
            # (a class's own entry: an inherited one, _make_subclass, is deleted again afterwards)
            saved[(owner, name)] = vars(owner).get(name, _INHERITED) if isinstance(owner, type) else \
                getattr(owner, name)
            setattr(owner, name, replacement)
        SIMULATING.append(mode)
        with mode:
            yield mode
    finally:
        if SIMULATING and SIMULATING[-1] is mode:
            SIMULATING.pop()
        for (owner, name), original in saved.items():
            if original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


def allocated_bytes(tensors: dict[str, dict[str, Any]], storages: dict[str, dict[str, Any]]) -> int:
    """``torch.cuda.memory_allocated()`` of a step: the blocks (rounded as the caching allocator rounds,
    ``app.trace.gpu``) of the storages its simulated tensors are on."""
    on_cuda = {fact["storage"] for fact in tensors.values() if fact["device"] == SIMULATED_NAME}
    sizes = (storages[sid]["nbytes"] for sid in on_cuda if sid in storages)
    return sum(round_size(size) for size in sizes if size)
