"""Tensor values as JSON-safe Python data."""

from __future__ import annotations

import math
from typing import Any

import torch

MAX_VALUES = 64
MAX_SUMMARY_NUMEL = 4_000_000


def json_scalar(value: Any) -> Any:
    """NaN and infinities become strings so they survive strict JSON; complex becomes its repr."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, bool | int):
        return value
    return str(value)


def json_nested(value: Any) -> Any:
    if isinstance(value, list):
        return [json_nested(v) for v in value]
    return json_scalar(value)


def tensor_values(tensor: torch.Tensor) -> Any:
    """Nested lists for small dense tensors, else None."""
    if tensor.numel() > MAX_VALUES or tensor.layout != torch.strided or tensor.device.type == "meta":
        return None
    try:
        return json_nested(tensor.detach().tolist())
    except (RuntimeError, TypeError, ValueError):
        return None


def storage_values(tensor: torch.Tensor, nbytes: int) -> list[Any] | None:
    """Every element of the tensor's storage, read with the tensor's dtype, in storage order."""
    size = tensor.element_size()
    count = nbytes // size if size else 0
    if count > MAX_VALUES or tensor.layout != torch.strided or tensor.device.type == "meta":
        return None
    try:
        flat = torch.as_strided(tensor.detach(), (count,), (1,), 0)
        return [json_scalar(v) for v in flat.tolist()]
    except (RuntimeError, TypeError, ValueError):
        return None


def tensor_summary(tensor: torch.Tensor) -> dict[str, Any] | None:
    numel = tensor.numel()
    if numel <= MAX_VALUES:
        return None
    summary: dict[str, Any] = {"numel": numel}
    if numel > MAX_SUMMARY_NUMEL or tensor.layout != torch.strided or tensor.device.type == "meta":
        return summary
    try:
        with torch.no_grad():
            data = tensor.detach()
            if data.is_floating_point():
                summary["min"] = json_scalar(data.min().item())
                summary["max"] = json_scalar(data.max().item())
                summary["mean"] = json_scalar(data.mean().item())
            elif data.dtype != torch.bool and not data.is_complex():
                summary["min"] = json_scalar(data.min().item())
                summary["max"] = json_scalar(data.max().item())
    except (RuntimeError, TypeError, ValueError):
        pass
    return summary
