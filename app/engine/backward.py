"""Watching torch run a backward pass, node by node, without running it ourselves.

When torch's backward entry point is called, every node of the graph below its roots gets a post
hook (removed again when the pass returns). torch calls the hook right after the node ran, with the
gradients it received and the ones it sends along its ``next`` edges; the hook asks for one step
then — the state right after that node. torch frees a node's saved tensors just after its post
hooks; the step shows them freed already, since that is the state once the node is done (and is
exactly what reading them afterwards gives). Hooks never change a gradient (they return None), and
hold no tensor beyond the hook call, so results, grads and errors are a plain run's.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, NamedTuple

import torch

from app.engine.saved import SAVED_PREFIX, packed_by_hooks, saved_names
from app.engine.tensor_facts import short_message
from app.engine.tracer import SNIPPET_FILENAME


@dataclass
class NodeRan:
    """What torch said of one node as it finished."""

    node: Any
    received: tuple[Any, ...]  # gradients w.r.t. the node's outputs
    sent: tuple[Any, ...]  # gradients w.r.t. its inputs, aligned with next_functions
    frees: bool  # torch releases its saved tensors now (no retain_graph)
    frame: FrameType | None  # the snippet frame whose line called backward


@dataclass
class BackwardWatch:
    """Hooks on the graph of one backward pass; ``on_node`` gets a ``NodeRan`` per node and says
    whether it took a step for it."""

    on_node: Callable[[NodeRan], bool]
    handles: list[Any] = field(default_factory=list)
    frees: bool = True
    # Every node that ran had its step, and the pass returned: each step read what its node changed,
    # so the line's own step need not read the whole pass again (``app.engine.run.on_backward``).
    # False once a node could not be hooked, a node ran without a step, or the pass raised.
    stepped_every_node: bool = True
    stepped: int = 0  # nodes that had their step

    def start(self, frame: FrameType) -> None:
        """Called as torch's ``_engine_run_backward(t_outputs, grad_tensors, keep_graph, ...)`` starts."""
        called = pass_arguments(frame)
        self.frees = not called.keep_graph
        with torch._C.DisableTorchFunction():
            for node in _graph(called.roots):
                try:
                    self.handles.append(node.register_hook(self._hook(node)))
                except (RuntimeError, AttributeError, TypeError):
                    self.stepped_every_node = False
                    continue  # a node torch does not let us hook: its step is simply missing

    def _hook(self, node: Any) -> Callable[..., None]:
        def post(grad_inputs: Any, grad_outputs: Any) -> None:
            # torch calls this from C++ with the tracer's trace function still set: off for all of
            # the engine's work here (``on_node`` reads the step with it off), or each of its calls
            # would be a trace event; restored as found, for the rest of the pass
            trace = sys.gettrace()
            sys.settrace(None)
            try:
                ran = NodeRan(node, tuple(grad_outputs), tuple(grad_inputs), self.frees, _snippet_frame())
                if self.on_node(ran):
                    self.stepped += 1
                else:
                    self.stepped_every_node = False
            finally:
                sys.settrace(trace)

        return post

    def stop(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


class PassArguments(NamedTuple):
    """What a backward pass was asked: its roots (tensors or gradient edges), whether it keeps the
    graph, and its ``inputs=`` — torch's C++ engine calls ``retain_grad()`` on each non-leaf one as
    the pass starts, so its ``.retains_grad`` (and later its ``.grad``) changes with no call to see."""

    roots: Any
    keep_graph: bool
    inputs: tuple[torch.Tensor, ...]


def pass_arguments(frame: FrameType) -> PassArguments:
    """The arguments of the frame of ``_engine_run_backward(t_outputs, grad_tensors, keep_graph,
    create_graph, inputs, ...)``, torch's backward entry point (positional after ``t_outputs``, or by
    keyword)."""
    arguments = frame.f_locals
    extra = arguments.get("args") or ()
    keywords = arguments.get("kwargs") or {}
    keep_graph = extra[1] if len(extra) > 1 else keywords.get("keep_graph", False)
    inputs = extra[3] if len(extra) > 3 else keywords.get("inputs", ())
    return PassArguments(arguments.get("t_outputs") or (), bool(keep_graph),
                         tuple(t for t in inputs or () if isinstance(t, torch.Tensor)))


def _graph(roots: Any) -> list[Any]:
    """Every node reachable from the roots (tensors or gradient edges) of a backward pass."""
    found: list[Any] = []
    seen: set[int] = set()
    stack = []
    for root in roots if isinstance(roots, list | tuple) else (roots,):
        node = root.grad_fn if isinstance(root, torch.Tensor) else getattr(root, "node", None)
        if node is not None:
            stack.append(node)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        found.append(node)
        stack.extend(fn for fn, _ in node.next_functions if fn is not None)
    return found


def _snippet_frame() -> FrameType | None:
    return snippet_frame_above(sys._getframe(2))


def snippet_frame_above(frame: FrameType | None) -> FrameType | None:
    """The innermost snippet frame at or above ``frame`` (the one whose line called into torch)."""
    while frame is not None and frame.f_code.co_filename != SNIPPET_FILENAME:
        frame = frame.f_back
    return frame


def plain_backward_lines(source: str) -> frozenset[int]:
    """Lines whose only code is one ``<x>.backward(...)`` call whose callee and arguments are names,
    their attributes and constants (``loss.backward()``, ``torch.autograd.backward(loss,
    retain_graph=True)``): running such a line up to the call binds no name and calls nothing that
    could change a container, so the names the last step walked still hold when its pass's first
    node runs (``app.engine.run.names_still``). Snippet code the line may run (a property, a
    ``backward`` of the snippet's own) is a frame event, which walks all the same."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    candidates = {node.lineno: node for node in ast.walk(tree) if isinstance(node, ast.Expr)
                  and node.lineno == node.end_lineno and _plain_backward(node.value)}
    if not candidates:
        return frozenset()
    inside = {id(part) for node in candidates.values() for part in ast.walk(node)}
    for node in ast.walk(tree):
        first, last = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if first is None or last is None or id(node) in inside:
            continue
        # Only what holds the call (a loop, a function, a try) may span its line, from a line before
        # it; its header's parts are nodes of their own, checked here too (``for i in range(\n3): ...``).
        for line in [line for line in candidates if first <= line <= last]:
            if line == first or not hasattr(node, "body"):
                del candidates[line]
    return frozenset(candidates)


def _plain_backward(value: ast.expr) -> bool:
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and \
        value.func.attr == "backward" and _reference(value.func) and \
        all(_reference(arg) or isinstance(arg, ast.Constant) for arg in value.args) and \
        all(word.arg is not None and (_reference(word.value) or isinstance(word.value, ast.Constant))
            for word in value.keywords)


def _reference(value: ast.expr) -> bool:
    """A name, or an attribute of one (``torch.autograd``): loads only."""
    while isinstance(value, ast.Attribute):
        value = value.value
    return isinstance(value, ast.Name)


def tensor_saves(node: Any, cache: dict[type, tuple[str, ...]]) -> list[str]:
    """The saved names of a node that hold tensors now (what torch is about to free)."""
    names = []
    for attribute in saved_names(node, cache):
        packed = packed_by_hooks(node, attribute)
        if packed is not None:  # kept by a saved_tensors_hooks pack function: freed all the same
            names.append(attribute.removeprefix(SAVED_PREFIX))
            continue
        try:
            value = getattr(node, attribute)
        except RuntimeError:
            continue  # already unreadable: it reads the same afterwards
        items = value if isinstance(value, list | tuple) else (value,)
        if any(isinstance(item, torch.Tensor) for item in items):
            names.append(attribute.removeprefix(SAVED_PREFIX))
    return names


_freed: list[str] = []


def freed_message() -> str:
    """What torch says when a saved tensor is read after backward freed it (asked of torch once)."""
    if not _freed:
        with torch._C.DisableTorchFunction(), torch.enable_grad():
            x = torch.ones(1, requires_grad=True)
            y = x.exp()
            y.backward()
            try:
                y.grad_fn._saved_result  # noqa: B018 - the read is the point
            except RuntimeError as error:
                _freed.append(short_message(error))
            else:  # pragma: no cover - a torch that keeps saved tensors after backward
                _freed.append("Freed by backward.")
    return _freed[0]
