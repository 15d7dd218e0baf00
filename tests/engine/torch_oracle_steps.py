"""Torch as the oracle at every step: a plain run of the snippet paused at the moments the trace has
steps (a line tracer that only reads the tensors the step names), and each step's facts compared with
what torch says right then — a fact the engine missed (a buffer written in place without a version
bump, a graph attached in C++, a saved slot whose "modified in place" message moved on) fails at the
step it was missed, not only at the end.

Compared for every named tensor: shape, dtype, strides, offset, view-ness, grad-ness, leaf-ness,
version, its node's type, ``retains_grad``, values (or min/max/mean past 64 elements), the storage's
size, ``.grad`` (values and version), which named tensors share a storage, and its graph as torch
holds it then: each node's type, ``next_functions`` and saved slots (the tensor each holds, or the
error torch gives for it). After each node of a backward pass (a step of its own in the trace), the
first group, read in a post hook on that node as the engine reads it.
"""

from __future__ import annotations

import io
import math
import random
import sys
import warnings
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch_oracle import (
    PLAIN_FILENAME,
    SEED,
    _show_warning,
    _unreadable,
    decode,
    first_sentence,
    invalid_node,
    node_name,
    resolve,
    trace,
)

_INLINE = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>"})
MAX_VALUES = 64  # app.engine.values: a larger tensor is sent as its min, max and mean


def _plain_facts(t: torch.Tensor, deep: bool = True) -> dict[str, Any]:
    """What a step must say of a live tensor, read from torch in the plain run, at that moment."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inference = t.is_inference()
        strided = t.layout == torch.strided
        invalid = invalid_node(t)  # torch refuses its node and leaf-ness: the fact says so, no node
        grad_fn = None if invalid is not None else t.grad_fn
        facts = {
            "shape": list(t.shape),
            "dtype": str(t.dtype).removeprefix("torch."),
            "requires_grad": t.requires_grad,
            "is_leaf": False if invalid is not None else t.is_leaf,
            "grad_fn": None if grad_fn is None else node_name(grad_fn),
            "invalid": invalid,
            "version": None if inference else t._version,
            "values": t.detach().clone() if t.numel() <= MAX_VALUES and strided else None,
            "grad": t.grad is not None,
            "unreadable": _unreadable(t),
        }
        if not deep:
            return facts
        grad = t.grad
        facts |= {
            "stride": list(t.stride()) if strided else None,
            "storage_offset": t.storage_offset() if strided else None,
            "is_view": t._is_view(),
            "retains_grad": t.retains_grad,
            "summary": _summary(t),
            "storage": _storage(t),
            "storage_values": _storage_values(t),
            "grad_facts": _plain_facts(grad, deep=False) if grad is not None else None,
            "graph": _graph(grad_fn) if grad_fn is not None else None,
        }
        return facts


def _summary(t: torch.Tensor) -> list[Any] | None:
    """min, max and mean of a large floating-point tensor, as the engine reduces them."""
    if t.numel() <= MAX_VALUES or t.layout != torch.strided or not t.dtype.is_floating_point or t.is_meta:
        return None
    data = t.detach()
    low, high = torch.aminmax(data)
    return [low.item(), high.item(), data.mean().item()]


def _storage(t: torch.Tensor) -> tuple[int, int] | None:
    """(address, bytes) of the storage under a strided tensor that has memory."""
    if t.layout != torch.strided or t.is_meta:
        return None
    try:
        storage = t.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError):  # a vmap's batched tensor, a functional wrapper
        return None


def _storage_values(t: torch.Tensor) -> torch.Tensor | None:
    """Every element of a small storage ``t`` spans whole, read with ``t``'s dtype as the memory holds
    them (a storage's elements no tensor covers may never have been written: garbage)."""
    if t.layout != torch.strided or t.is_meta or t.is_conj() or t.is_neg() or t.is_quantized:
        return None
    try:
        count = t.untyped_storage().nbytes() // t.element_size()
        if count > MAX_VALUES or count != t.numel():
            return None
        return torch.as_strided(t.detach(), (count,), (1,), 0).clone()
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def _graph(root: Any) -> list[dict[str, Any]]:
    """The graph under ``root`` as torch holds it now, in depth-first order of ``next_functions``."""
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        entry: dict[str, Any] = {"name": node_name(node), "saved": {},
                                 "next": [fn is None for fn, _ in node.next_functions]}
        if hasattr(node, "variable"):
            entry["variable"] = _plain_facts(node.variable, deep=False)
        for attribute in dir(node):
            if attribute.startswith("_saved_"):
                entry["saved"][attribute.removeprefix("_saved_")] = _slot(node, attribute)
        out.append(entry)
        stack.extend(reversed([fn for fn, _ in node.next_functions if fn is not None]))
    return out


def _slot(node: Any, attribute: str) -> Any:
    """A saved slot: the tensor torch gives for it (its facts), the error torch raises instead, or
    None when it is not compared — no tensor, or one a ``saved_tensors_hooks`` pack hook holds
    (unpacking it calls the hook: checkpoint's recomputes the forward; the engine shows the packed
    value and never calls it)."""
    if _packed(node, attribute):
        return None
    try:
        value = getattr(node, attribute)
    except RuntimeError as error:
        return ("error", first_sentence(str(error)))
    return ("tensor", _plain_facts(value, deep=False)) if isinstance(value, torch.Tensor) else None


def _packed(node: Any, attribute: str) -> bool:
    try:
        raw = getattr(node, "_raw" + attribute)
    except (AttributeError, RuntimeError):
        return False
    items = raw if isinstance(raw, list | tuple) else (raw,)
    return any(getattr(item, "unpack_hook", None) is not None for item in items)


def _resolve_at(frame: Any, namespace: dict[str, Any], label: str) -> Any:
    """``label`` at a plain run's line: a module-level one, or ``f:name`` in the innermost ``f``."""
    if ":" in label.split("[")[0]:
        function, _, rest = label.partition(":")
        while frame is not None:  # (two active functions of one name share the prefix: either)
            if frame.f_code.co_name == function:
                try:
                    return resolve(dict(frame.f_locals), rest)
                except (KeyError, AttributeError, NameError):
                    pass
            frame = frame.f_back
        raise LookupError(label)
    return resolve(namespace, label)


def steps_match_plain(source: str, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Every forward step of the trace against a plain run of the same code, paused at the same
    moments. ``skip``: labels not compared (random state)."""
    result = trace(source)
    forward = [s for s in result["steps"] if s.get("phase", "forward") == "forward"]
    backward = [s for s in result["steps"] if s.get("phase") == "backward"]
    captured, passes = _capture(source, [dict(s["variables"]) for s in forward],
                                [dict(s["variables"]) for s in backward], skip)
    plain_lines = [line for line, _ in captured]
    assert plain_lines == [s["line"] for s in forward], plain_lines
    _assert_backward_steps(backward, passes)
    for step, (line, facts) in zip(forward, captured, strict=True):
        for label, plain in facts.items():
            where = f"{label} after line {line}"
            assert isinstance(plain, dict), (where, plain)
            tid = step["variables"][label]
            _assert_fact(step, tid, plain, where)
            fact = step["tensors"][tid]
            for key in ("stride", "storage_offset", "is_view", "retains_grad"):
                if plain[key] is not None:
                    assert fact[key] == plain[key], (where, key, fact[key], plain[key])
            _assert_summary(fact, plain, where)
            if plain["storage"] is not None and fact["storage"] is not None:
                storage = step["storages"][fact["storage"]]
                assert storage["nbytes"] == plain["storage"][1], (where, "nbytes")
                _assert_storage_values(storage, fact, plain, where)
            if plain["grad_facts"] is not None:
                _assert_fact(step, fact["grad"], plain["grad_facts"], where + " .grad")
            if plain["graph"] is not None:
                _assert_graph(step, fact["grad_fn"], plain["graph"], where)
        _assert_sharing(step, facts, line)
    return result


def _capture(source: str, labels_per_step: list[dict[str, str]], labels_per_node: list[dict[str, str]],
             skip: frozenset[str]) -> tuple[list[Any], list[Any]]:
    """Run ``source`` plainly, reading the named tensors' facts where the trace has a step: after
    each line, and after each node of a backward pass (a post hook on every node of its graph, as
    the engine's own, ``app.engine.backward``)."""
    captured: list[tuple[int, dict[str, Any]]] = []
    passes: list[tuple[str, dict[str, Any]]] = []
    torch.manual_seed(SEED)
    random.seed(SEED)
    namespace: dict[str, Any] = {"__name__": "__main__", "torch": torch, "nn": nn, "F": F, "math": math}
    stack: list[list[Any]] = []

    def emit(line: int, frame: Any) -> None:
        labels = labels_per_step[len(captured)] if len(captured) < len(labels_per_step) else {}
        captured.append((line, read(labels, frame)))

    def node_ran(node: Any) -> None:
        labels = labels_per_node[len(passes)] if len(passes) < len(labels_per_node) else {}
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != PLAIN_FILENAME:
            frame = frame.f_back
        passes.append((node_name(node), read(labels, frame, deep=False)))

    def read(labels: dict[str, str], frame: Any, deep: bool = True) -> dict[str, Any]:
        facts: dict[str, Any] = {}
        for label in labels:
            if label in skip:
                continue
            try:
                value = _resolve_at(frame, namespace, label)
            except Exception:  # noqa: BLE001 - a label the plain run cannot name: the count differs below
                facts[label] = "unresolved"
                continue
            if not isinstance(value, torch.Tensor):
                facts[label] = "not a tensor"
                continue
            try:
                facts[label] = _plain_facts(value, deep)
            except (RuntimeError, ValueError, TypeError, NotImplementedError):
                continue  # a lazy module's uninitialised parameter: nothing torch says to compare
        return facts

    def local(frame: Any, event: str, arg: Any) -> Any:
        top = stack[-1]
        if event == "line":
            if top[0] is not None:
                emit(top[0], frame)
            top[0], top[1] = frame.f_lineno, False
        elif event == "exception":
            top[1] = True
        elif event == "return":
            stack.pop()
            if top[0] is not None and not top[1]:
                emit(top[0], frame)
        return local

    def global_trace(frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_filename != PLAIN_FILENAME or code.co_name in _INLINE:
            return None
        stack.append([None, False])
        return local

    run_backward = torch.autograd._engine_run_backward

    def watched(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
        handles = []
        for node in _pass_graph(t_outputs):
            try:
                handles.append(node.register_hook(lambda _in, _out, node=node: node_ran(node)))
            except (RuntimeError, AttributeError, TypeError):
                continue
        try:
            return run_backward(t_outputs, *args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()

    buffer = io.StringIO()
    with redirect_stdout(buffer), redirect_stderr(buffer), warnings.catch_warnings():
        warnings.showwarning = _show_warning
        torch.autograd._engine_run_backward = watched
        sys.settrace(global_trace)
        try:
            exec(compile(source, PLAIN_FILENAME, "exec", dont_inherit=True), namespace)  # noqa: S102
        except Exception:  # noqa: BLE001, S110 - the trace's own error is compared by the caller
            pass
        finally:
            sys.settrace(None)
            torch.autograd._engine_run_backward = run_backward
    return captured, passes


def _pass_graph(roots: Any) -> list[Any]:
    """Every node a backward pass from ``roots`` (tensors or gradient edges) may run."""
    found: list[Any] = []
    seen: set[int] = set()
    stack = [root.grad_fn if isinstance(root, torch.Tensor) else getattr(root, "node", None)
             for root in (roots if isinstance(roots, list | tuple) else (roots,))]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        found.append(node)
        stack.extend(fn for fn, _ in node.next_functions)
    return found


def _assert_backward_steps(steps: list[dict[str, Any]], passes: list[tuple[str, dict[str, Any]]]) -> None:
    """A step per node a backward pass ran, in torch's order, each naming what torch says then."""
    names = [step["nodes"][step["node"]]["name"] for step in steps]
    assert names == [name for name, _ in passes], ("backward nodes", names)
    for index, (step, (name, facts)) in enumerate(zip(steps, passes, strict=True)):
        for label, plain in facts.items():
            where = f"{label} after backward node {index} ({name}, line {step['line']})"
            assert isinstance(plain, dict), (where, plain)
            _assert_fact(step, step["variables"][label], plain, where)


def _assert_fact(step: dict[str, Any], tid: str | None, plain: dict[str, Any], where: str) -> None:
    assert tid is not None, (where, "missing")
    fact = step["tensors"][tid]
    for key in ("shape", "dtype", "requires_grad", "is_leaf", "version"):
        assert fact[key] == plain[key], (where, key, fact[key], plain[key])
    node = step["nodes"][fact["grad_fn"]]["name"] if fact["grad_fn"] else None
    assert node == plain["grad_fn"], (where, "grad_fn", node, plain["grad_fn"])
    assert (fact["grad"] is not None) == plain["grad"], (where, "grad")
    assert fact["unavailable"].get("values") == plain["unreadable"], (where, fact["unavailable"])
    assert fact["unavailable"].get("grad_fn") == plain["invalid"], (where, fact["unavailable"])
    if plain["values"] is not None and plain["unreadable"] is None:
        actual = torch.tensor(decode(fact["values"]), dtype=plain["values"].dtype)
        torch.testing.assert_close(actual, plain["values"], rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m, where=where: f"{where}: {m}")


def _assert_storage_values(storage: dict[str, Any], fact: dict[str, Any], plain: dict[str, Any],
                           where: str) -> None:
    """The storage's elements as the memory holds them now (read with the tensor's dtype, when the
    storage was described with it)."""
    expected = plain["storage_values"]
    if expected is None or storage["dtype"] != fact["dtype"] or storage["values"] is None:
        return
    actual = torch.tensor(decode(storage["values"]), dtype=expected.dtype)
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True,
                               msg=lambda m: f"{where} storage values: {m}")


def _assert_summary(fact: dict[str, Any], plain: dict[str, Any], where: str) -> None:
    summary = fact["summary"]
    if plain["summary"] is None or summary is None or summary.get("min") is None:
        return
    actual = [decode(summary[key]) for key in ("min", "max", "mean")]
    # (float32 numbers are sent in their shortest round-trip form: compare them as float32)
    as_dtype = getattr(torch, fact["dtype"])
    expected = torch.tensor(plain["summary"], dtype=torch.float64).to(as_dtype)
    torch.testing.assert_close(torch.tensor(actual, dtype=torch.float64).to(as_dtype), expected, rtol=0,
                               atol=0, equal_nan=True, msg=lambda m: f"{where} summary: {m}")


def _assert_graph(step: dict[str, Any], nid: str, plain: list[dict[str, Any]], where: str) -> None:
    """The engine's graph under ``nid``, in the same depth-first order, node for node as torch's."""
    order: list[str] = []
    seen: set[str] = set()
    stack = [nid]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        order.append(current)
        stack.extend(reversed([n for n in step["nodes"][current]["next"] if n is not None]))
    names = [step["nodes"][n]["name"] for n in order]
    assert names == [entry["name"] for entry in plain], (where, "graph", names)
    for current, entry in zip(order, plain, strict=True):
        node = step["nodes"][current]
        at = f"{where}, node {entry['name']}"
        assert [n is None for n in node["next"]] == entry["next"], at
        if "variable" in entry:
            _assert_fact(step, node["variable"], entry["variable"], at + " variable")
        for name, slot in entry["saved"].items():
            if slot is None:
                continue
            if slot[0] == "error":
                assert node["saved"][name] is None, (at, name)
                assert node["saved_errors"].get(name) == slot[1], (at, name, node["saved_errors"].get(name))
            else:
                _assert_fact(step, node["saved"][name], slot[1], f"{at} saved {name}")


def _assert_sharing(step: dict[str, Any], facts: dict[str, Any], line: int) -> None:
    """Named tensors share a storage id exactly when torch says they share memory."""
    pointers = {label: plain["storage"][0] for label, plain in facts.items()
                if isinstance(plain, dict) and plain["storage"] is not None and plain["storage"][0]}
    storage = {label: step["tensors"][step["variables"][label]]["storage"] for label in pointers}
    labels = sorted(pointers)
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            same = storage[a] == storage[b]
            assert same == (pointers[a] == pointers[b]), (f"after line {line}", a, b, "storage shared")
