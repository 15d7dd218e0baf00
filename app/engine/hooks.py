"""The hooks a snippet registers on its autograd graph, and a node's ``metadata`` keys, for the inspector.

torch keeps a node's Python hooks (``grad_fn.register_hook``, ``register_prehook``) and a non-leaf
tensor's hooks (``t.register_hook``, which hands ``t._backward_hooks`` to ``grad_fn``) in dicts only
its C++ side holds: no attribute of the node returns them. So while a snippet that may register
hooks (``registers_hooks``) runs, ``HookWatch`` is a profile function (``sys.setprofile``, which sees
C calls with the node as the bound method's ``__self__``) and notes, per node, the dict torch's
``_HookMixin._register_hook`` returns, weakly: the node's C++ hook object owns it, so it dies with
the node, and what it holds (hooks added, ``handle.remove()``) is read as it is at each step.
A leaf's hooks are on the leaf itself, read through its ``AccumulateGrad``: ``_backward_hooks``
(``t.register_hook``, run before its gradient is accumulated) and ``_post_accumulate_grad_hooks``
(``t.register_post_accumulate_grad_hook``, run after).

Reading runs nothing of the snippet's: the hooks are listed (``__qualname__`` of plain functions the
snippet defined), never called. A line that registers or removes a hook may change nodes the
incremental snapshot would not read again, so its step is read whole (``Touches.whole``).

``metadata`` is read with ``node.metadata``, which makes the node's (empty) dict if it has none — as
the snippet's own first read would (the engine's node ids read it of every ``AccumulateGrad``
already); tests/engine/test_engine_hooks.py shows the snippet cannot tell.
"""

from __future__ import annotations

import os
import re
import sys
import unicodedata
import weakref
from types import FrameType, FunctionType
from typing import Any

import torch
from torch.autograd.function import _HookMixin
from torch.utils.hooks import RemovableHandle

from app.engine.ids import unique_sequence
from app.engine.tracer import SNIPPET_FILENAME

MAX_HOOKS = 64  # per node (NodeFact.hooks)
MAX_KEYS = 64  # metadata keys per node
MAX_KEY = 200
# The C methods that register a hook on a node -> the kind of hook ("tensor": t.register_hook on a
# non-leaf, which files t._backward_hooks under its grad_fn).
NODE_METHODS = {"register_hook": "post", "register_prehook": "pre", "_register_hook_dict": "tensor"}
REGISTER = _HookMixin._register_hook.__code__  # what the node's C++ calls: returns (dict, handle)
REMOVE = RemovableHandle.remove.__code__
# A leaf's own registrations: nothing of its AccumulateGrad changes, so the profile sees their return.
LEAF_REGISTER = (torch.Tensor.register_hook.__code__,
                 torch.Tensor.register_post_accumulate_grad_hook.__code__)
# The engine's own hooks (app.engine.backward hooks every node of a backward pass) are not the snippet's.
ENGINE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

_current: HookWatch | None = None  # the run in progress (one at a time in a worker)


def node_key(node: Any) -> Any:
    """Who a node is while it lives: its sequence number, or (``AccumulateGrad``, which all share one)
    its metadata dict, which lives exactly as long as it does."""
    sequence = unique_sequence(node)
    if sequence is None:
        return ("object", id(node.metadata))
    return (sequence, type(node).__name__)


class HookWatch:
    """Notes the hook dicts of nodes while a snippet runs (``with watch:``); ``on_change()`` is called
    when a line registers or removes a hook. ``active`` False: a snippet that never mentions hooks,
    watched by nothing. ``with watch.quiet():`` around the engine's own reading of a step, which
    registers no hook and would pay a profile call for each of its many calls (half the run)."""

    def __init__(self, on_change: Any, active: bool = True) -> None:
        self._on_change = on_change
        self.active = active
        self._dicts: dict[Any, dict[str, weakref.ref]] = {}  # node key -> kind -> its hook dict
        self._pending: list[tuple[Any, str]] = []  # (node, kind) of the registering C call in flight
        self._previous: Any = None

    def __enter__(self) -> HookWatch:
        global _current
        if self.active:
            _current = self
            self._previous = sys.getprofile()
            sys.setprofile(self._profile)
        return self

    def __exit__(self, *_exc: object) -> None:
        global _current
        if self.active:
            sys.setprofile(self._previous)
            _current = None

    def quiet(self) -> _Quiet:
        return _Quiet(self._profile if self.active else None)

    def hooks(self, node: Any) -> list[dict[str, Any]]:
        kinds = self._dicts.get(node_key(node))
        found: list[dict[str, Any]] = []
        for kind, ref in (kinds or {}).items():
            held = ref()
            for hook in list(held.values()) if held is not None else ():
                if _theirs(hook):
                    found.append({"kind": kind, "name": hook_name(hook)})
        return found

    def _note(self, node: Any, kind: str, hooks: Any) -> None:
        try:
            ref = weakref.ref(hooks)
        except TypeError:
            return
        self._dicts.setdefault(node_key(node), {})[kind] = ref

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        # Called for every call and return while the snippet runs: the common case must be cheap.
        if event == "c_call":
            kind = NODE_METHODS.get(getattr(arg, "__name__", ""))
            node = getattr(arg, "__self__", None) if kind is not None else None
            if node is None or not isinstance(node, torch.autograd.graph.Node) or _ours(frame):
                return
            if kind == "tensor":  # Tensor.register_hook's own frame: self._backward_hooks is set
                self._note(node, kind, getattr(frame.f_locals.get("self"), "_backward_hooks", None))
                self._on_change()
            else:
                self._pending.append((node, kind))
        elif event == "return":
            code = frame.f_code
            if code is REGISTER and self._pending and isinstance(arg, tuple):
                node, kind = self._pending[-1]
                self._note(node, kind, arg[0])
                self._on_change()
            elif code in LEAF_REGISTER and not _ours(frame.f_back):
                self._on_change()  # a leaf's hook: its AccumulateGrad reads it
        elif event == "call" and frame.f_code is REMOVE and not _ours(frame.f_back):
            self._on_change()
        elif event in ("c_return", "c_exception") and self._pending:
            node, _kind = self._pending[-1]
            if getattr(arg, "__self__", None) is node and getattr(arg, "__name__", "") in NODE_METHODS:
                self._pending.pop()


class _Quiet:
    """No profile function while the block runs (if one was on)."""

    __slots__ = ("_profile", "_was")

    def __init__(self, profile: Any) -> None:
        self._profile = profile

    def __enter__(self) -> None:
        # Only our own: a profiler the snippet runs (torch.profiler's with_stack) put its C function
        # in our place, and sys.getprofile() answers its context object, which set back as a Python
        # profile function fails at the next call ("'TraceContext' object is not callable").
        was = sys.getprofile() if self._profile is not None else None
        self._was = was if was is not None and was == self._profile else None
        if self._was is not None:
            sys.setprofile(None)

    def __exit__(self, *_exc: object) -> None:
        if self._was is not None:
            sys.setprofile(self._was)


def _ours(frame: FrameType | None) -> bool:
    return frame is not None and frame.f_code.co_filename.startswith(ENGINE_DIR)


# What a snippet must spell to register a hook on a node: the method's name, or a way to reach a
# method by a computed string (``getattr(t, "register_" + "ho" + "ok")``, ``vars(type(t))[...]``,
# ``operator.attrgetter``, ``inspect.getmembers``, code run from a string, a pickle's payload).
# Still unseen, whatever the source: a registration that C code calls (``map(node.register_hook, fs)``,
# ``functools.partial``, ``operator.methodcaller``): the profile function sees only the interpreter's
# own calls, and torch's ``_register_hook`` is not told which node it is for.
WORDS = ("hook", "getattr", "attrgetter", "getmembers", "__dict__", "pickle")  # (getattr: __getattribute__)
CALL_WORDS = ("vars", "eval", "exec", "compile")
# the builtins, as names: not "evaluate", nor model.eval() or torch.compile()
CALLS = re.compile(r"(?<![.\w])(?:vars|eval|exec|compile)\b")


def registers_hooks(source: str) -> bool:
    """May this snippet register hooks (``register_hook``, ``register_prehook``, a module's
    ``register_full_backward_hook``)? The profile function is on only then: on for every run, it
    would cost each 5-12 % more CPU time (a loop's many calls; measured with the benchmark's
    snippets) to see names no ordinary snippet builds. Identifiers are read as Python reads them:
    ``register_ｈｏｏｋ`` (full-width letters) is ``register_hook`` (NFKC). Substring tests first: one
    regular expression of all the words took 0.7 ms on a 5 KB source, these take about 0.05 ms."""
    text = source if source.isascii() else unicodedata.normalize("NFKC", source)
    if any(word in text for word in WORDS):
        return True
    return any(word in text for word in CALL_WORDS) and CALLS.search(text) is not None


def hook_name(hook: Any) -> str | None:
    """A plain function the snippet defined is named by its ``__qualname__``; anything else (torch's
    own hooks, partials, callable objects) by nothing: reading more could run the snippet's code."""
    if isinstance(hook, FunctionType) and hook.__code__.co_filename == SNIPPET_FILENAME:
        return str(hook.__qualname__)[:MAX_KEY]
    return None


def _theirs(hook: Any) -> bool:
    """Not one of the engine's own (the post hooks that watch a backward pass)."""
    code = getattr(hook, "__code__", None)
    return code is None or not code.co_filename.startswith(ENGINE_DIR)


def node_hooks(node: Any, leaf: torch.Tensor | None) -> list[dict[str, Any]]:
    """The hooks torch will run for ``node``: its own (noted while registered) and, for an
    ``AccumulateGrad``, its leaf's hooks, in the order torch runs them: before the gradient is
    accumulated, then after."""
    found = _current.hooks(node) if _current is not None else []
    if leaf is not None:
        for kind, held in (("tensor", leaf._backward_hooks),
                           ("post_accumulate_grad", leaf._post_accumulate_grad_hooks)):
            for hook in list(held.values()) if held else ():
                found.append({"kind": kind, "name": hook_name(hook)})
    return found[:MAX_HOOKS]


def metadata_keys(node: Any) -> list[str]:
    """The keys of ``node.metadata`` (names only: the values are the snippet's objects)."""
    try:
        metadata = node.metadata
    except (AttributeError, RuntimeError):
        return []
    if not isinstance(metadata, dict) or not metadata:
        return []
    keys = list(metadata)[:MAX_KEYS]
    return [(key if isinstance(key, str) else type(key).__name__)[:MAX_KEY] for key in keys]
