"""What ``torch.cuda`` (and ``torch.accelerator``) answer while cuda runs on the CPU
(``app.engine.cuda_on_cpu``): what one GPU would answer to the calls GPU code makes — is a GPU there,
which one, synchronize, streams and timing events, seeding, ``memory_allocated()`` (a model) — and,
for what is not simulated, a message that says so (``NotSimulated``, in both languages).

``patches(simulation)`` lists them as ``(owner, name) -> replacement``; the simulation puts them in
place for the run and takes them out again.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from app.run_errors import SaidError


class NotSimulated(SaidError):
    """A part of torch.cuda this simulation does not answer."""

    def __init__(self, what: str) -> None:
        super().__init__("runtime.cuda_not_simulated", {"what": what})


def _ordinal(device: Any = None) -> None:
    if device is not None and not (isinstance(device, str) and device == "cuda"):
        index = device if isinstance(device, int) else torch.device(device).index
        if index not in (None, 0):
            raise RuntimeError("CUDA error: invalid device ordinal")


class _Device:
    """``with torch.cuda.device(0):`` on the one simulated device."""

    def __init__(self, device: Any) -> None:
        _ordinal(device)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


class _Stream:
    """The one stream of the simulated device: work on it is done when the call returns."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def is_capturing(self) -> bool:
        return False

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def wait_stream(self, stream: Any) -> None:
        return None

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False


class _Event:
    """``torch.cuda.Event(enable_timing=True)``: times taken on this machine's clock (the CPU's work)."""

    def __init__(self, enable_timing: bool = False, *args: Any, **kwargs: Any) -> None:
        self.enable_timing = enable_timing
        self.at: float | None = None

    def record(self, stream: Any = None) -> None:
        self.at = time.perf_counter()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def wait(self, stream: Any = None) -> None:
        return None

    def elapsed_time(self, end: _Event) -> float:
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self.at is None or end.at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end.at - self.at) * 1000.0


def _not_simulated(name: str) -> Callable[..., Any]:
    return _not_simulated_as(f"torch.cuda.{name}")


def _not_simulated_as(what: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotSimulated(what)
    return refuse


def _device_name(device: Any = None) -> str:
    _ordinal(device)
    return "cuda:0 (simulated on the CPU)"


def _seed(seed: int) -> None:
    torch.default_generator.manual_seed(int(seed))  # the generator simulated tensors draw from


def patches(simulation: Any) -> dict[tuple[Any, str], Any]:
    """``simulation``: the run's ``CudaOnCpu`` (its ``allocated()``, ``on_cuda`` and ``_note``)."""
    def memory_allocated(device: Any = None) -> int:
        _ordinal(device)
        return simulation.allocated()

    def no_op(device: Any = None) -> None:
        _ordinal(device)

    patches: dict[tuple[Any, str], Any] = {
        (torch.cuda, "is_available"): lambda: True,
        (torch.cuda, "device_count"): lambda: 1,
        (torch.cuda, "current_device"): lambda: 0,
        (torch.cuda, "set_device"): _ordinal,
        (torch.cuda, "synchronize"): no_op,
        (torch.cuda, "empty_cache"): lambda: None,
        (torch.cuda, "device"): _Device,
        (torch.cuda, "is_bf16_supported"): lambda *a, **k: True,
        (torch.cuda, "get_device_name"): _device_name,
        (torch.cuda, "manual_seed"): _seed,
        (torch.cuda, "manual_seed_all"): _seed,
        (torch.cuda, "get_rng_state"): lambda device="cuda": torch.get_rng_state(),
        (torch.cuda, "set_rng_state"): lambda state, device="cuda": torch.set_rng_state(state),
        (torch.cuda, "memory_allocated"): memory_allocated,
        (torch.cuda, "reset_peak_memory_stats"): no_op,
        (torch.cuda, "reset_max_memory_allocated"): no_op,
        (torch.cuda, "Stream"): _Stream,
        (torch.cuda, "current_stream"): lambda device=None: _Stream(),
        (torch.cuda, "default_stream"): lambda device=None: _Stream(),
        (torch.cuda, "stream"): lambda stream=None: _Stream(),
        (torch.cuda, "Event"): _Event,
        (torch.accelerator, "current_stream"): lambda device=None: _Stream(),
        (torch.accelerator, "is_available"): lambda *a, **k: True,
        (torch.accelerator, "current_accelerator"): lambda *a, **k: torch.device("cuda"),
        (torch.accelerator, "device_count"): lambda: 1,
        (torch.accelerator, "current_device_index"): lambda: 0,
        (torch.accelerator, "synchronize"): no_op,
        # cuDNN is not simulated: torch's RNNs ask it before flattening their weights (and warn)
        (torch.backends.cudnn, "is_acceptable"): lambda tensor: False,
    }
    for name in ("max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
                 "memory_summary", "mem_get_info", "get_device_properties", "get_device_capability"):
        patches[(torch.cuda, name)] = _not_simulated(name)
    make_subclass = torch.Tensor._make_subclass

    def parameter(*args: Any, **kwargs: Any) -> Any:  # (cls, data, require_grad): torch's own signature
        """``nn.Parameter(data)``: torch makes it in C++ on data's memory (no torch function sees it)."""
        made = make_subclass(*args, **kwargs)
        data = args[1] if len(args) > 1 else kwargs.get("data")
        if isinstance(data, torch.Tensor):
            simulation.note(made, simulation.on_cuda(data))
        return made

    patches[(torch.Tensor, "_make_subclass")] = staticmethod(parameter)
    # DataParallel splits batches across real devices (torch's C++ scatter): said by its own name
    data_parallel = sys.modules["torch.nn.parallel.data_parallel"]  # (torch.nn.parallel's name is a function)
    patches[(data_parallel, "_check_balance")] = _not_simulated_as("torch.nn.DataParallel")
    autocast = torch.amp.autocast_mode.autocast
    original_init = autocast.__init__

    def autocast_init(self: Any, device_type: str, dtype: Any = None, *args: Any, **kwargs: Any) -> None:
        if device_type == "cuda":  # CPU autocast, in the dtype CUDA's would pick
            device_type, dtype = "cpu", dtype if dtype is not None else torch.get_autocast_dtype("cuda")
        original_init(self, device_type, dtype, *args, **kwargs)

    patches[(autocast, "__init__")] = autocast_init
    return patches
