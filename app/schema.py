"""The one wire schema: what the worker reports and what every renderer reads.

The trace engine (``app.engine``) produces plain dicts of exactly this shape; the server validates
them with these models before anything else touches them (the worker's output is hostile data).
Nothing here imports torch.

Field meanings (the public contract of ``POST /api/run``):

* Ids are short strings, stable across the steps of one run: ``t<n>`` tensors, ``s<n>`` storages,
  ``n<n>`` graph nodes. The same live object keeps its id in every step; two tensors share a storage
  id exactly when torch says they share storage.
* ``Step.line`` is the 1-based snippet line whose execution the snapshot follows.
* ``Step.phase`` is ``"forward"`` for a step after a line ran. A line that runs a backward pass
  (``backward()``, ``torch.autograd.grad``) is preceded by one ``"backward"`` step per autograd node
  torch ran, in torch's order: ``node`` is the node that just ran, ``received`` the gradients that
  flowed into it, ``sent`` what it passed along each ``next`` edge; the rest of the step is the state
  right after that node (a leaf's ``.grad`` after its ``AccumulateGrad``, saved tensors freed).
* ``Step.stdout`` is everything printed so far (cumulative, capped).
* ``Step.variables`` maps a name the user can reach (``x``, ``losses[0]``, ``d['k']``,
  ``model.0.weight``, ``f:x`` for a local of function ``f``) to a tensor id.
* ``TensorFact.storage_offset`` and ``stride`` count elements, not bytes.
* ``TensorFact.values`` is the tensor as nested lists when it has at most 64 elements, else null.
  Non-finite floats are the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` so they survive JSON.
* ``TensorFact.version`` is the version counter, null where torch keeps none (inference tensors).
* ``Step.arrays`` maps ``a<n>`` to a numpy array the user can reach (``ArrayFact``; its ``names``
  are its variable names, up to 8). ``strides`` count bytes, as numpy does. ``storage`` is the
  storage whose memory it shares (``t.numpy()``, ``np.asarray(t)``, ``torch.from_numpy(a)``) and
  ``offset`` its first element's byte offset there; without one it is on a buffer of its own
  (``np.array(t)``, ``t.numpy().copy()``), ``buffer_nbytes`` that buffer's size when known. ``owner``
  says who allocated the bytes: ``"numpy"``, ``"torch"`` (``t.numpy()``, or a tensor the trace no
  longer reaches), ``"other"`` (a Python buffer). ``values`` as for
  tensors (≤ 64 elements); ``unavailable["values"]`` says why they were not read.
* ``NodeFact.next`` lists ``next_functions`` in order (null where torch has None);
  ``saved`` maps a saved name (without ``_saved_``) to a tensor id, or to null when backward freed it.
  ``metadata`` are the keys of ``grad_fn.metadata``, ``hooks`` the hooks torch runs for the node
  (``HookFact``); both optional, absent when empty.

Two formats carry the same trace (``POST /api/run`` answers v1 unless asked for ``"format": "delta"``):

* **v1** (``RunResult``): every step holds the whole state after its line — every variable, tensor,
  storage and node alive then, and all output so far. Simple to read, but a loop that keeps tensors
  alive costs steps × tensors.
* **v2, "delta"** (``DeltaTrace``): every step holds only what its line changed. ``DeltaStep.variables``
  are the names bound or rebound by the line, ``tensors`` / ``storages`` / ``nodes`` the facts that
  appeared or changed (each one whole, as in v1), ``dropped`` what disappeared (unbound names, ids no
  longer reachable), and ``stdout`` the text printed during the line. Replaying the steps in order
  from an empty state gives v1's state at every step: ``app.trace.delta.expand`` is that replay, and
  v1 is always exactly ``expand(v2)``. An id that is dropped and later reachable again reappears with
  its whole fact. ``ok``, ``truncated`` and ``error`` mean the same in both formats.
"""

from __future__ import annotations

from itertools import chain
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_serializer,
)
from pydantic.json_schema import JsonSchemaValue
from typing_extensions import TypeAliasType

MAX_ID = 16
MAX_NAME = 200
MAX_TEXT = 4096

Scalar = float | int | bool | str | None


class _ScalarsFirst:
    """The JSON schema of ``NestedValues`` as it always read (the scalars, the list, null), although
    the union tries the list second, after float: pydantic's smart union picks the same member in any
    order (only a list matches a list, and each scalar type matches exactly one member), but a list
    tried after five failing scalars costs five errors built and dropped, at every level of every
    tensor's values (half of reading a trace's values), and a float (most values) is best tried first."""

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        found = handler(schema)
        choices = found.get("anyOf", [])
        lists = [c for c in choices if c.get("type") == "array"]
        nulls = [c for c in choices if c.get("type") == "null"]
        found["anyOf"] = [c for c in choices if c not in lists and c not in nulls] + lists + nulls
        return found


# Values nest as deep as the tensor has dimensions; pydantic cannot bound recursion depth for us,
# so the worker only sends values for tensors of at most 64 elements.
NestedValues = TypeAliasType(  # type: ignore[misc]
    "NestedValues", "Annotated[float | list[NestedValues] | int | bool | str | None, _ScalarsFirst]")

_PLAIN = frozenset({float, int, bool, str, type(None)})  # ``Scalar``'s types, exactly (no subclass)
_ROWS = frozenset({list})


def _plain_values(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """``NestedValues`` as the union validates it, for the values an engine sends (a scalar, a row of
    scalars, rows of them: a tensor of up to two dimensions) proved at C speed, by the set of their
    items' types, and kept as given: the union would build each list anew, item by item (half of
    validating a 1,600-step Adam answer, and as much again to free). Anything else (more
    dimensions, another type) goes to the union itself, so what is accepted, and as what, is the
    union's word (tests/api/test_schema_values.py)."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is list:
        kinds = set(map(type, value))
        if kinds <= _PLAIN or (kinds == _ROWS and _PLAIN.issuperset(map(type, chain.from_iterable(value)))):
            return value
    return handler(value)


# A fact's ``values``: ``NestedValues``, validated by ``_plain_values`` first (same JSON schema).
Values = Annotated[NestedValues, WrapValidator(_plain_values)]


class _Fact(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# "untraced": the snippet went on where the tracer could not follow it (it caught the tracer's own
# stop, or recursed so deep the tracer itself ran out of stack): the steps shown end there.
ErrorKind = Literal["rejected", "runtime", "timeout", "memory", "output", "internal", "untraced"]


ErrorParam = Annotated[str, Field(max_length=MAX_TEXT)] | int | float


class RunError(_Fact):
    kind: ErrorKind
    type: str = Field(max_length=MAX_NAME)
    message: str = Field(max_length=MAX_TEXT)
    line: int | None = None
    # What the line that failed printed before it failed (a warning, anomaly mode's "Traceback of
    # forward call"): no step holds it, since the line never finished.
    output: str = Field(default="", max_length=1 << 17)
    # When our own code wrote the message (the sandbox, the engine, the policy gate, the server), the
    # message's id and its fields (``app/run_errors.py``): the page translates from them. ``message``
    # is always the English text; torch's and Python's own errors have no code.
    code: str | None = Field(default=None, max_length=MAX_ID * 4)
    params: dict[str, ErrorParam] = Field(default_factory=dict, max_length=8)

    @model_serializer(mode="wrap")
    def _without_empty_code(self, handler: SerializerFunctionWrapHandler) -> dict:
        # torch's own errors carry no code: their JSON stays what it always was
        data = handler(self)
        if data.get("code") is None and not data.get("params"):
            data.pop("code", None)
            data.pop("params", None)
        return data


class Summary(_Fact):
    """A few numbers for tensors too large to send whole."""

    numel: int
    min: Scalar = None
    max: Scalar = None
    mean: Scalar = None


class TensorFact(_Fact):
    shape: list[int] = Field(max_length=64)
    dtype: str = Field(max_length=32)
    stride: list[int] = Field(max_length=64)
    storage_offset: int
    storage: str | None = Field(max_length=MAX_ID)
    requires_grad: bool
    is_leaf: bool
    grad_fn: str | None = Field(max_length=MAX_ID)
    grad: str | None = Field(max_length=MAX_ID)
    base: str | None = Field(max_length=MAX_ID)
    version: int | None
    values: Values = None
    summary: Summary | None = None
    is_view: bool = False
    retains_grad: bool = False
    is_inference: bool = False
    device: str = Field(default="cpu", max_length=32)
    # Conjugate / negative views: they read differently from the memory they share.
    is_conj: bool = False
    is_neg: bool = False
    # Facts torch would not give for this tensor (an uninitialised lazy parameter has no shape,
    # a nested tensor no strides): fact name -> torch's reason. The rest of the fact is true.
    unavailable: dict[str, str] = Field(default_factory=dict)


class StorageFact(_Fact):
    nbytes: int
    element_size: int = 1
    dtype: str = Field(default="uint8", max_length=32)
    # Element values of small storages (≤ 64 elements), in storage order: what the memory view draws.
    values: list[Scalar] | None = Field(default=None, max_length=64)


# (``post_accumulate_grad`` came later: a kind a reader does not know is one it can skip)
HookKind = Literal["pre", "post", "tensor", "post_accumulate_grad"]


class HookFact(_Fact):
    """A hook torch runs for a node (``NodeFact.hooks``): ``pre`` from ``grad_fn.register_prehook``,
    ``post`` from ``grad_fn.register_hook``, ``tensor`` from ``t.register_hook`` on a tensor whose
    grad_fn (or, for a leaf, whose ``AccumulateGrad``) the node is, ``post_accumulate_grad`` from
    ``t.register_post_accumulate_grad_hook`` on a leaf whose ``AccumulateGrad`` the node is (run once
    ``t.grad`` is updated). ``name`` is the ``__qualname__`` of a function the snippet defined, null
    for any other callable."""

    kind: HookKind
    name: str | None = Field(default=None, max_length=MAX_NAME)


def _empty(value: list) -> bool:
    return not value


class NodeFact(_Fact):
    name: str = Field(max_length=MAX_NAME)
    next: list[str | None] = Field(max_length=256)
    variable: str | None = Field(default=None, max_length=MAX_ID)
    saved: dict[str, str | None] = Field(default_factory=dict)
    # Saved tensors that can no longer be unpacked: freed by backward, or modified in place since
    # they were saved (torch's own message, which predicts the backward failure).
    saved_errors: dict[str, str] = Field(default_factory=dict)
    # The keys of ``grad_fn.metadata`` (anomaly mode's ``traceback_``, the snippet's own), and the
    # hooks torch will run for the node, in the order torch runs each kind. Left out of the JSON when
    # empty: traces from before they existed read the same.
    metadata: list[Annotated[str, Field(max_length=MAX_NAME)]] = Field(
        default_factory=list, max_length=64, exclude_if=_empty)
    hooks: list[HookFact] = Field(default_factory=list, max_length=64, exclude_if=_empty)


ArrayOwner = Literal["torch", "numpy", "other"]
ArrayName = Annotated[str, Field(max_length=MAX_NAME)]


class ArrayFact(_Fact):
    """A numpy array the snippet can reach (``Step.arrays``; see the module docstring)."""

    names: list[ArrayName] = Field(max_length=8)
    shape: list[int] = Field(max_length=64)
    strides: list[int] = Field(max_length=64)  # in bytes, as numpy says
    dtype: str = Field(max_length=32)  # numpy's name: "float32"
    itemsize: int
    storage: str | None = Field(default=None, max_length=MAX_ID)
    offset: int = 0  # bytes from the start of its storage (or buffer) to its first element
    owner: ArrayOwner = "numpy"
    buffer_nbytes: int | None = None
    base: str | None = Field(default=None, max_length=MAX_ID)
    writeable: bool = True
    values: Values = None
    unavailable: dict[Annotated[str, Field(max_length=32)], Annotated[str, Field(max_length=MAX_TEXT)]] = \
        Field(default_factory=dict, max_length=4)


Phase = Literal["forward", "backward"]
Grads = list[str | None]


# A limit that cut what one step traces -> the limit's value: "tensors"/"nodes" (objects read per
# step), "names" (names kept), "members" (container members read per step), "items" (members read per
# container), "depth" (container nesting). Reached past it is simply not in the step; the view says so.
CapName = Literal["tensors", "nodes", "names", "members", "items", "depth"]


class StepFields(_Fact):
    """What both formats' steps carry alike.

    The backward pass a step is part of (``phase: "backward"``): the autograd node that just ran, the
    gradients it received (w.r.t. its outputs) and the gradients it sent along each of its ``next``
    edges (aligned with ``next``) — tensor ids, or null for none. And ``capped``: the limits that cut
    this step (per step, not carried over: a delta step says it again while it holds)."""

    phase: Phase = "forward"
    node: str | None = Field(default=None, max_length=MAX_ID)
    received: Grads = Field(default_factory=list, max_length=256)
    sent: Grads = Field(default_factory=list, max_length=256)
    capped: dict[CapName, int] = Field(default_factory=dict)


class Step(StepFields):
    line: int
    stdout: str = ""
    variables: dict[str, str]
    tensors: dict[str, TensorFact]
    storages: dict[str, StorageFact]
    nodes: dict[str, NodeFact]
    arrays: dict[str, ArrayFact] = Field(default_factory=dict)


class RunResult(_Fact):
    ok: bool
    truncated: bool = False
    error: RunError | None = None
    # The code's cuda ran on the CPU (``"cuda_on_cpu": true`` asked for it): tensors with device
    # ``cuda:0`` are simulated there, in CPU memory (app.engine.cuda_on_cpu).
    cuda_on_cpu: bool = False
    steps: list[Step]


class Dropped(_Fact):
    """What disappeared during one step: unbound names, and ids no longer reachable."""

    variables: list[str] = Field(default_factory=list)
    tensors: list[str] = Field(default_factory=list)
    storages: list[str] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list)
    arrays: list[str] = Field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.variables or self.tensors or self.storages or self.nodes or self.arrays)

    def __hash__(self) -> int:
        # Hashable, so that pydantic hands every step that drops nothing the one ``NO_DROPS`` (a
        # default it cannot hash it deep-copies for each such step: a quarter of validating a
        # 3,000-step answer, measured). Frozen and never changed in place (joined parts make a new one).
        return hash((tuple(self.variables), tuple(self.tensors), tuple(self.storages), tuple(self.nodes),
                     tuple(self.arrays)))


NO_DROPS = Dropped()


class DeltaStep(StepFields):
    """One executed line (or one node of a backward pass) in the delta format: only what changed
    since the previous step."""

    line: int
    stdout: str = ""  # printed during this step; the output so far is every earlier step's, joined
    variables: dict[str, str] = Field(default_factory=dict)  # bound or rebound here -> tensor id
    tensors: dict[str, TensorFact] = Field(default_factory=dict)  # appeared or changed, whole
    storages: dict[str, StorageFact] = Field(default_factory=dict)
    nodes: dict[str, NodeFact] = Field(default_factory=dict)
    arrays: dict[str, ArrayFact] = Field(default_factory=dict)
    dropped: Dropped = NO_DROPS


class DeltaTrace(_Fact):
    """The trace in the delta format (v2); ``app.trace.delta.expand`` turns it into ``RunResult``."""

    format: Literal["delta"] = "delta"
    ok: bool
    truncated: bool = False
    error: RunError | None = None
    cuda_on_cpu: bool = False  # as RunResult's
    steps: list[DeltaStep]


Severity = Literal["error", "warning", "info"]


class Patch(_Fact):
    """One edit of the snippet: lines ``start`` to ``end`` (1-based, inclusive) become ``text`` (its
    lines joined by newlines; "" removes them). ``end`` = ``start`` - 1 inserts ``text`` before line
    ``start``. A finding's patches, applied together, are its fix as code (``app.diagnosis.apply``)."""

    start: int = Field(ge=1)
    end: int = Field(ge=0)
    text: str = Field(max_length=MAX_TEXT)


class Diagnostic(_Fact):
    """A pitfall found in the trace, computed by the server (``app.diagnostics``), never by the worker.

    ``rule`` is a stable id (e.g. ``graph-kept-by-container``); ``step`` indexes ``steps`` (the
    snapshot where it applies) and ``line`` is that snippet line; ``tensors`` are the ids the views
    highlight; ``lines`` are other lines involved (e.g. where a version was bumped). ``patch``: the fix as
    edits of the snippet, when the fix is one the code can carry out (the page's "Try this fix").
    ``title``, ``message`` and ``fix`` are for people; ``rule`` is for programs.
    """

    rule: str = Field(max_length=64)
    severity: Severity
    title: str = Field(max_length=MAX_TEXT)
    message: str = Field(max_length=MAX_TEXT)
    fix: str = Field(max_length=MAX_TEXT)
    step: int | None = None
    line: int | None = None
    tensors: list[str] = Field(default_factory=list)
    lines: list[int] = Field(default_factory=list)
    bytes: int | None = None
    patch: list[Patch] = Field(default_factory=list, max_length=16, exclude_if=_empty)


class MemoryAccount(_Fact):
    """Bytes alive after one step, by who keeps them alive (each storage counted once).

    ``variable_bytes``: storages reachable from named variables (incl. their ``.grad`` and
    ``._base``). ``graph_bytes``: storages that only the autograd graph keeps alive (saved
    tensors, ``AccumulateGrad`` leaves no variable reaches). ``shared_bytes``: storages that two
    or more tensors use (part of the two above, not added to them).
    """

    step: int
    total_bytes: int
    variable_bytes: int
    graph_bytes: int
    shared_bytes: int
    graph_storages: list[str] = Field(default_factory=list)
    shared_storages: list[str] = Field(default_factory=list)


class MemoryChange(_Fact):
    """``MemoryAccount`` in the delta format: the same totals, and the storages that joined or left
    the graph-only and shared sets at this step (the sets themselves are the replay of these)."""

    step: int
    total_bytes: int
    variable_bytes: int
    graph_bytes: int
    shared_bytes: int
    graph_added: list[str] = Field(default_factory=list)
    graph_removed: list[str] = Field(default_factory=list)
    shared_added: list[str] = Field(default_factory=list)
    shared_removed: list[str] = Field(default_factory=list)


class RunResponse(RunResult):
    """What ``POST /api/run`` answers: the validated trace plus the server's own analysis of it."""

    diagnostics: list[Diagnostic] = Field(default_factory=list)
    memory: list[MemoryAccount] = Field(default_factory=list)


class DeltaResponse(DeltaTrace):
    """``POST /api/run`` with ``"format": "delta"``: the delta trace plus the server's analysis."""

    diagnostics: list[Diagnostic] = Field(default_factory=list)
    memory: list[MemoryChange] = Field(default_factory=list)


class RunRequest(BaseModel):
    """Body of ``POST /api/run``. Size bounds are enforced by the server from its settings."""

    model_config = ConfigDict(extra="forbid")

    code: str
    format: Literal["v1", "delta"] = "v1"
    # Run code written for a GPU with cuda mapped to the CPU (tensors shown on cuda:0, simulated).
    cuda_on_cpu: bool = False
