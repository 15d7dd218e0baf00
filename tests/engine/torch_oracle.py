"""Torch as the oracle: run a snippet plainly and under the engine, and compare what each says.

``run_plain`` executes the snippet the way a learner would (same names bound, same seed), and the
``assert_*`` helpers check the engine's JSON against the live torch objects of that plain run.
"""

from __future__ import annotations

import io
import json
import math
import random
import re
import sys
import warnings
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from app.engine import EngineLimits, trace_snippet
from app.schema import RunResult

PLAIN_FILENAME = "<snippet>"  # as the engine names it: warnings name the same file
SEED = 0  # the engine seeds torch and random with 0 before every run


@dataclass
class Plain:
    namespace: dict[str, Any]
    stdout: str
    error: BaseException | None
    error_line: int | None


def run_plain(source: str) -> Plain:
    """Execute ``source`` without the engine: the behaviour the trace must reproduce."""
    torch.manual_seed(SEED)
    random.seed(SEED)
    namespace: dict[str, Any] = {"__name__": "__main__", "torch": torch, "nn": nn, "F": F, "math": math}
    buffer = io.StringIO()
    error: BaseException | None = None
    line = None
    # Warnings shown as a plain run shows them, on stderr, though pytest collects them around tests.
    with redirect_stdout(buffer), redirect_stderr(buffer), warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            exec(compile(source, PLAIN_FILENAME, "exec", dont_inherit=True), namespace)  # noqa: S102
        except Exception as exc:  # the snippet's error is part of its behaviour
            error = exc
            tb = exc.__traceback__
            while tb is not None:
                if tb.tb_frame.f_code.co_filename == PLAIN_FILENAME:
                    line = tb.tb_lineno
                tb = tb.tb_next
    return Plain(namespace, buffer.getvalue(), error, line)


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))


def trace(source: str, **limits: Any) -> dict[str, Any]:
    """The engine's result, checked against the contract on the way: strict JSON, schema, references."""
    result = trace_snippet(source, EngineLimits(**limits))
    json.dumps(result, allow_nan=False)  # NaN and infinities must already be strings
    RunResult.model_validate(result)
    for step in result["steps"]:
        assert_references_resolve(step)
    return result


def assert_references_resolve(step: dict[str, Any]) -> None:
    """Every id a step mentions is described in that same step."""
    tensors, nodes, storages = step["tensors"], step["nodes"], step["storages"]
    for label, tid in step["variables"].items():
        assert tid in tensors, (label, tid)
    for tid, fact in tensors.items():
        assert fact["storage"] is None or fact["storage"] in storages, tid
        for key in ("grad", "base"):
            assert fact[key] is None or fact[key] in tensors, (tid, key)
        assert fact["grad_fn"] is None or fact["grad_fn"] in nodes, tid
    for nid, node in nodes.items():
        assert all(n is None or n in nodes for n in node["next"]), nid
        assert node["variable"] is None or node["variable"] in tensors, nid
        assert all(t is None or t in tensors for t in node["saved"].values()), nid


# --- reading the engine's values back -------------------------------------------------------------

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def decode(values: Any) -> Any:
    """Numbers back from JSON: NaN and infinities are strings, and so is a complex number (its repr)."""
    if isinstance(values, list):
        return [decode(v) for v in values]
    if isinstance(values, str):
        return _NON_FINITE[values] if values in _NON_FINITE else complex(values)
    return values


def assert_values(values: Any, expected: torch.Tensor) -> None:
    """The JSON values read back as exactly the tensor (float32 bit-for-bit, NaN equal to NaN)."""
    if expected.numel() > 64:
        assert values is None
        return
    if expected.numel() == 0:
        assert values == expected.tolist()  # nested empty lists, shaped like the tensor
        return
    actual = torch.tensor(decode(values), dtype=expected.dtype)
    torch.testing.assert_close(actual, expected.detach(), rtol=0, atol=0, equal_nan=True)


# --- labels ---------------------------------------------------------------------------------------

_LABEL = re.compile(r"^([A-Za-z_]\w*)(.*)$")


def resolve(namespace: dict[str, Any], label: str) -> torch.Tensor:
    """The object a ``variables`` label names in the plain run (``x``, ``losses[0]``, ``model.0.weight``,
    ``lstm._flat_weights[0]``, ``trainer.model.0.weight``, ``steps[0].<closure>.net.weight``: a
    function's closure variable, ``opt.state[0]['exp_avg']``: the state of the optimizer's first
    parameter, counted over its ``param_groups``), walked one part at a time from its first name."""
    match = _LABEL.match(label)
    assert match, label
    head, rest = match.groups()
    obj = namespace[head]
    while rest:
        if isinstance(obj, nn.Module):  # a parameter or buffer by its dotted name (model.0.weight)
            named = dict(obj.named_parameters()) | dict(obj.named_buffers())
            if rest.removeprefix(".") in named:
                return named[rest.removeprefix(".")]
        if isinstance(obj, torch.optim.Optimizer) and rest.startswith(".state["):
            index, _, rest = rest.removeprefix(".state[").partition("]")
            obj = obj.state[[p for group in obj.param_groups for p in group["params"]][int(index)]]
            continue
        part = _PART.match(rest)
        assert part, label
        closure, attribute, subscript = part.groups()
        if closure is not None:
            cells = dict(zip(obj.__code__.co_freevars, obj.__closure__ or (), strict=True))
            obj = cells[closure].cell_contents
        elif attribute is not None:
            digit = attribute.isdigit() and isinstance(obj, nn.Module)
            obj = obj[int(attribute)] if digit else getattr(obj, attribute)
        else:
            obj = eval("_obj" + subscript, {}, {"_obj": obj})  # noqa: S307 - a test snippet's own key
        rest = rest[part.end():]
    return obj


_PART = re.compile(r"\.<closure>\.([A-Za-z_]\w*)|\.([^.\[\]]+)|(\[[^\]]*\])")


# --- comparing facts with live tensors -------------------------------------------------------------


def node_name(node: Any) -> str:
    return type(node).__name__


def assert_tensor(step: dict[str, Any], tid: str, t: torch.Tensor, *, deep: bool = True) -> None:
    """One tensor fact says what torch says about ``t``."""
    fact = step["tensors"][tid]
    where = f"{tid} at line {step['line']}"
    assert fact["shape"] == list(t.shape), where
    assert fact["stride"] == _strides(t), where
    assert fact["storage_offset"] == t.storage_offset(), where
    assert fact["dtype"] == str(t.dtype).removeprefix("torch."), where
    assert fact["requires_grad"] == t.requires_grad, where
    invalid = invalid_node(t)
    if invalid is not None:  # torch refuses its node: the fact says why, and shows none
        assert fact["unavailable"].get("grad_fn") == invalid, where
        assert fact["grad_fn"] is None and fact["is_leaf"] is False, where
    else:
        assert "grad_fn" not in fact["unavailable"], where
        assert fact["is_leaf"] == t.is_leaf, where
    assert fact["is_view"] == t._is_view(), where
    assert fact["is_inference"] == t.is_inference(), where
    assert fact["version"] == (None if t.is_inference() else t._version), where
    unreadable = _unreadable(t)  # a meta tensor's, a vmap's batched tensor's: what torch says instead
    assert fact["unavailable"].get("values") == unreadable, where
    if unreadable is None and t.layout == torch.strided:
        assert_values(fact["values"], t)
    else:  # (a sparse tensor's numbers are its indices' and values' tensors)
        assert fact["values"] is None, where
    if not deep:
        return
    assert fact["retains_grad"] == t.retains_grad, where
    if invalid is not None or t.grad_fn is None:
        assert fact["grad_fn"] is None, where
    else:
        assert step["nodes"][fact["grad_fn"]]["name"] == node_name(t.grad_fn), where
    with warnings.catch_warnings():  # a non-leaf's .grad: None unless the snippet assigned one
        warnings.simplefilter("ignore")
        grad = t.grad
    if grad is None:
        assert fact["grad"] is None, where
    else:
        assert_tensor(step, fact["grad"], grad, deep=False)
    if t._base is None:
        assert fact["base"] is None, where
    else:
        assert_tensor(step, fact["base"], t._base, deep=False)


def _strides(t: torch.Tensor) -> list[int]:
    try:
        return list(t.stride())
    except RuntimeError:  # "Sparse CSR tensors do not have strides"
        return []


def invalid_node(t: torch.Tensor) -> str | None:
    """What torch says instead of ``t.grad_fn`` when it refuses it (an output of ``unbind`` or
    ``split`` whose base was written in place since: it prints ``grad_fn=<Invalid>``), else None."""
    try:
        t.grad_fn  # noqa: B018 - the read is the question
    except RuntimeError as error:
        return first_sentence(str(error))
    return None


def first_sentence(message: str) -> str:
    head, stop, _ = message.partition(". ")
    return head + "." if stop else message


def assert_graph(step: dict[str, Any], nid: str, node: Any, seen: set[str] | None = None) -> None:
    """The engine's node ``nid`` and everything below it match torch's graph from ``node``."""
    seen = set() if seen is None else seen
    if nid in seen:
        return
    seen.add(nid)
    fact = step["nodes"][nid]
    assert fact["name"] == node_name(node)
    torch_next = [fn for fn, _ in node.next_functions]
    assert [n is None for n in fact["next"]] == [fn is None for fn in torch_next], fact["name"]
    for child_id, child in zip(fact["next"], torch_next, strict=True):
        if child is not None:
            assert_graph(step, child_id, child, seen)
    if hasattr(node, "variable"):
        assert_tensor(step, fact["variable"], node.variable, deep=False)
        assert fact["variable"] in step["tensors"]
    for attribute in dir(node):
        if not attribute.startswith("_saved_"):
            continue
        name = attribute.removeprefix("_saved_")
        if _held_by_checkpoint(node, name):
            # Reading it would call checkpoint's unpack hook, which runs the forward again (the
            # snippet's code: its prints, its random draws); the engine says so instead.
            assert fact["saved"][name] is None
            assert fact["saved_errors"][name] == CHECKPOINT_SLOT
            continue
        try:
            value = getattr(node, attribute)
        except RuntimeError as error:
            assert fact["saved"][name] is None
            assert fact["saved_errors"][name] == first_sentence(str(error))
            continue
        if isinstance(value, torch.Tensor):
            assert fact["saved"][name] is not None, (fact["name"], name)
            assert_tensor(step, fact["saved"][name], value, deep=False)


CHECKPOINT_SLOT = "Not kept: torch.utils.checkpoint recomputes it during backward."


def _held_by_checkpoint(node: Any, name: str) -> bool:
    """Whether a non-reentrant checkpoint packed this saved slot (a holder its unpack hook recomputes)."""
    try:
        raw = getattr(node, "_raw_saved_" + name)
        packed = [item.data for item in (raw if isinstance(raw, list | tuple) else (raw,))]
    except (AttributeError, RuntimeError):  # no raw slot, or freed by backward
        return False
    return any(type(item).__module__ == "torch.utils.checkpoint" for item in packed)


def assert_step_matches(
    step: dict[str, Any], namespace: dict[str, Any], labels: set[str] | None = None
) -> None:
    """Every named tensor of ``step`` against the live object of the same name, graphs, storage sharing."""
    variables = {k: v for k, v in step["variables"].items() if ":" not in k}
    if labels is not None:
        assert set(variables) == labels
    live = {label: resolve(namespace, label) for label in variables}
    for label, t in live.items():
        assert isinstance(t, torch.Tensor), label
        assert_tensor(step, variables[label], t)
        if invalid_node(t) is None and t.grad_fn is not None:
            assert_graph(step, step["tensors"][variables[label]]["grad_fn"], t.grad_fn)
    # Same storage id exactly when torch says the memory is shared (empty tensors share nothing).
    strided = [(label, t) for label, t in live.items() if t.layout == torch.strided]  # sparse: no storage
    for i, (a, ta) in enumerate(strided):
        for b, tb in strided[i + 1 :]:
            pa, pb = ta.untyped_storage().data_ptr(), tb.untyped_storage().data_ptr()
            shared = pa == pb and pa != 0
            same_id = step["tensors"][variables[a]]["storage"] == step["tensors"][variables[b]]["storage"]
            assert same_id == shared, (a, b)
    # The same object under two names is one tensor id; different objects, different ids.
    items = list(live.items())
    for i, (a, ta) in enumerate(items):
        for b, tb in items[i + 1 :]:
            assert (variables[a] == variables[b]) == (ta is tb), (a, b)


def assert_same_as_plain(source: str, labels: set[str] | None = None, **limits: Any) -> dict[str, Any]:
    """The traced run ends where the plain run ends: same error, same output, same final tensors."""
    result = trace(source, **limits)
    plain = run_plain(source)
    assert result["steps"], "no steps"
    assert result["steps"][-1]["stdout"] == plain.stdout
    if plain.error is None:
        assert result["ok"], result["error"]
        assert result["error"] is None
        assert_step_matches(result["steps"][-1], plain.namespace, labels)
    else:
        assert not result["ok"]
        error = result["error"]
        assert error["kind"] == "runtime"
        assert error["type"] == type(plain.error).__name__
        assert error["message"] == str(plain.error)
        assert error["line"] == plain.error_line
    return result


# --- small accessors -------------------------------------------------------------------------------


def lines(result: dict[str, Any]) -> list[int]:
    """The line of every step after a line ran (the steps inside backward passes left out)."""
    return [step["line"] for step in result["steps"] if step.get("phase", "forward") == "forward"]


def step_after(result: dict[str, Any], line: int, occurrence: int = -1) -> dict[str, Any]:
    """The snapshot taken after ``line`` ran (its last run by default)."""
    matching = [step for step in result["steps"] if step["line"] == line
                and step.get("phase", "forward") == "forward"]
    assert matching, f"no step for line {line}"
    return matching[occurrence]


def fact(step: dict[str, Any], label: str) -> dict[str, Any]:
    return step["tensors"][step["variables"][label]]


def node_of(step: dict[str, Any], label: str) -> dict[str, Any]:
    return step["nodes"][fact(step, label)["grad_fn"]]


def _unreadable(t: torch.Tensor) -> str | None:
    """What torch says when asked for a small tensor's numbers (a vmap's batched tensor has none)."""
    if t.numel() > 64 or t.layout != torch.strided:
        return None
    try:
        t.tolist()
    except RuntimeError as error:
        return first_sentence(str(error).split("\n")[0])
    return None


def assert_steps_match_plain(source: str, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Every forward step of the trace against a plain run paused at the same moments: see
    ``torch_oracle_steps.steps_match_plain`` (imported here when called: it builds on this module)."""
    from torch_oracle_steps import steps_match_plain

    return steps_match_plain(source, skip)
