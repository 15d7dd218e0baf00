"""A schema-valid trace whose parts disagree (a forged answer: a child can write any frame) never
makes a route answer 500: the consistency check (``app.trace.consistency``, run in ``parse_result``
where the worker's answer is accepted) turns it into a clear error that says what was wrong, keeping
the steps before the first bad one; what it accepts goes through every view.

The runner here stands in for a hostile child: it hands the server exactly the bytes such a child
could send, through the same ``parse_result`` the pool uses. ``tests/sandbox/test_outcomes.py`` does
it with a real child that writes its own forged answer."""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.config import Settings
from app.sandbox.frames import encode_frame
from app.sandbox.runner import bounds_for, parse_result
from app.schema import DeltaTrace
from app.trace.consistency import Bounds, problem
from app.trace.delta import compress
from app.web.main import create_app
from app.web.permalink import encode_code
from tests import golden
from tests.api.forgery import mutate, through_the_routes

CODE = "x = torch.ones(2, 3)\ny = x\n"
TENSOR = {
    "shape": [2, 3], "dtype": "float32", "stride": [3, 1], "storage_offset": 0, "storage": "s1",
    "requires_grad": False, "is_leaf": True, "grad_fn": None, "grad": None, "base": None,
    "version": 0, "values": [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]],
}
STORAGE = {"nbytes": 24, "element_size": 4, "dtype": "float32", "values": [1.0] * 6}
NODE = {"name": "MulBackward0", "next": [], "variable": None, "saved": {}}
# t1's memory seen by numpy (t.numpy()): 6 float32 elements from byte 0
ARRAY = {"names": ["a"], "shape": [6], "strides": [4], "dtype": "float32", "itemsize": 4, "storage": "s1",
         "offset": 0, "owner": "torch"}
GOOD_STEP = {"line": 1, "variables": {"x": "t1"}, "tensors": {"t1": TENSOR}, "storages": {"s1": STORAGE}}


def _trace(*later: dict, first: dict | None = None) -> dict:
    return {"format": "delta", "ok": True, "steps": [first or GOOD_STEP, *later]}


def _with(**fields: object) -> dict:
    return {**TENSOR, **fields}


# One forgery per class: (id, trace, what the error must say)
FORGED = [
    ("values-nesting", _trace({"line": 2, "tensors": {"t1": _with(values=[1.0, 2.0])}}),
     "not nested as its shape"),
    # a list where the innermost dimension has a scalar (the check's one-loop path)
    ("values-too-deep",
     _trace({"line": 2, "tensors": {"t1": _with(values=[[1.0, [2.0], 3.0], [4.0, 5.0, 6.0]])}}),
     "not nested as its shape"),
    ("stride-rank", _trace({"line": 2, "tensors": {"t1": _with(stride=[1])}}), "1 strides for 2 dimensions"),
    ("offset-past-storage", _trace({"line": 2, "tensors": {"t1": _with(storage_offset=10**9, values=None)}}),
     "reaches byte"),
    ("negative-size", _trace({"line": 2, "tensors": {"t1": _with(shape=[-2, 3], values=None)}}), "negative"),
    ("storage-values", _trace({"line": 2, "storages": {"s1": {**STORAGE, "values": [1.0]}}}),
     "1 values for 6 elements"),
    ("dangling-name", _trace({"line": 2, "variables": {"y": "t9"}}), "name 'y' refers to tensor t9"),
    ("dangling-storage", _trace({"line": 2, "tensors": {"t2": _with(storage="s9")}}), "storage s9"),
    ("dangling-grad-fn", _trace({"line": 2, "tensors": {"t1": _with(grad_fn="n4")}}), "node n4"),
    ("dangling-grad", _trace({"line": 2, "tensors": {"t1": _with(grad="t7")}}), "tensor t7"),
    ("dangling-base", _trace({"line": 2, "tensors": {"t1": _with(base="t8")}}), "tensor t8"),
    ("dangling-next", _trace({"line": 2, "nodes": {"n1": {**NODE, "next": ["n5", None]}}}), "node n5"),
    ("dangling-saved", _trace({"line": 2, "nodes": {"n1": {**NODE, "saved": {"self": "t6"}}}}), "tensor t6"),
    ("dangling-variable", _trace({"line": 2, "nodes": {"n1": {**NODE, "name": "AccumulateGrad",
                                                              "variable": "t5"}}}), "tensor t5"),
    ("dropped-while-named", _trace({"line": 2, "dropped": {"tensors": ["t1"]}}), "refers to tensor t1"),
    ("dropped-missing", _trace({"line": 2, "dropped": {"nodes": ["n3"]}}), "drops node n3"),
    ("dropped-and-set", _trace({"line": 2, "tensors": {"t1": TENSOR}, "dropped": {"tensors": ["t1"]}}),
     "both drops and sets"),
    ("node-cycle", _trace({"line": 2, "nodes": {"n1": {**NODE, "next": ["n2"]},
                                                "n2": {**NODE, "next": ["n1"]}}}), "its own ancestor"),
    ("next-changed", _trace({"line": 2, "nodes": {"n1": NODE, "n2": NODE}},
                            {"line": 2, "nodes": {"n1": {**NODE, "next": ["n2"]}}}),
     "next functions changed"),
    ("step-before-its-ids", _trace(first={"line": 1, "variables": {"x": "t1"}}), "refers to tensor t1"),
    ("line-out-of-range", _trace({"line": 40}), "line 40"),
    ("backward-without-node", _trace({"line": 2, "phase": "backward"}), "names no node"),
    ("backward-missing-node", _trace({"line": 2, "phase": "backward", "node": "n3"}), "node n3"),
    ("forward-with-gradients", _trace({"line": 2, "received": ["t1"]}), "forward step carries"),
    ("ok-with-error", {**_trace(), "error": {"kind": "runtime", "type": "E", "message": "m"}}, "ok=true"),
    ("too-much-output", _trace({"line": 2, "stdout": "x" * 70_000}), "printed more than"),
    ("array-dangling-storage", _trace({"line": 2, "arrays": {"a1": {**ARRAY, "storage": "s9"}}}),
     "storage s9"),
    ("array-past-storage", _trace({"line": 2, "arrays": {"a1": {**ARRAY, "offset": 20}}}), "24-byte buffer"),
    ("array-values-nesting", _trace({"line": 2, "arrays": {"a1": {**ARRAY, "values": [1.0]}}}),
     "not nested as its shape"),
    ("array-dropped-missing", _trace({"line": 2, "dropped": {"arrays": ["a4"]}}), "drops array a4"),
]


def test_every_golden_trace_is_consistent() -> None:
    for record in golden.load():
        trace = DeltaTrace.model_validate(compress(record.result))
        bounds = Bounds(lines=record.source.count("\n") + 1, max_steps=record.max_steps,
                        max_stdout=record.max_stdout)
        assert problem(trace, bounds) is None, record.name


def test_the_unforged_base_is_consistent() -> None:
    trace = DeltaTrace.model_validate(_trace({"line": 2, "variables": {"y": "t1"}, "arrays": {"a1": ARRAY}}))
    assert problem(trace, bounds_for(CODE, Settings())) is None


@pytest.mark.parametrize(("data", "reason"), [f[1:] for f in FORGED], ids=[f[0] for f in FORGED])
def test_each_class_of_forgery_is_named(data: dict, reason: str) -> None:
    answer = parse_result(encode_frame(json.dumps(data).encode()), 8 << 20, bounds_for(CODE, Settings()))
    assert answer.error is not None and answer.error.type == "UnusableAnswer", answer.error
    assert answer.error.kind == "internal" and not answer.ok
    assert answer.error.message.startswith("The sandbox returned an unusable answer: "), answer.error.message
    assert reason in answer.error.message, answer.error.message
    kept = answer.steps
    sent = DeltaTrace.model_validate(data).steps
    assert [s.model_dump() for s in kept] == [s.model_dump() for s in sent[:len(kept)]]
    assert problem(answer) is None  # what is kept is itself consistent
    through_the_routes(answer, CODE)


def test_a_view_the_engine_could_not_read_may_reach_past_its_storage() -> None:
    """``resize_`` shrinks a storage under its views: the engine says so and sends no values."""
    resized = _with(storage_offset=10**9, values=None, unavailable={"values": "past the end"})
    trace = DeltaTrace.model_validate(_trace({"line": 2, "tensors": {"t1": resized}}))
    assert problem(trace) is None
    through_the_routes(trace, CODE)


def test_past_a_cap_references_may_dangle_and_every_view_still_draws() -> None:
    capped = {"line": 2, "capped": {"tensors": 1, "nodes": 1},
              "tensors": {"t1": _with(grad_fn="n8", grad="t9")},
              "nodes": {"n1": {**NODE, "next": ["n7"], "saved": {"self": "t4"}}}}
    trace = DeltaTrace.model_validate(_trace(capped))
    assert problem(trace) is None
    through_the_routes(trace, CODE)
    uncapped = DeltaTrace.model_validate(_trace(capped, {"line": 2}))
    found = problem(uncapped)
    assert found is not None and found.step == 2, found


def _fuzz_corpus() -> list[tuple[golden.Golden, dict]]:
    return [(g, compress(g.result)) for g in golden.load()
            if 2 <= len(g.result["steps"]) <= 24 and any(s["nodes"] for s in g.result["steps"])]


def test_mutated_golden_traces_are_rejected_or_drawn() -> None:
    """300 seeded mutations (ids deleted, duplicated, repointed; shapes, strides, offsets, values,
    drops, steps and phases altered): each is refused by the schema, or rejected by the check (and the
    steps it keeps are drawn), or accepted and drawn, with no exception anywhere."""
    rng = random.Random(20261201)
    corpus = _fuzz_corpus()
    outcomes: Counter[str] = Counter()
    for number in range(300):
        record, base = rng.choice(corpus)
        data = copy.deepcopy(base)
        did = mutate(data, rng, rng.choice([1, 1, 2, 3]))
        try:
            trace = DeltaTrace.model_validate(data)
        except ValidationError:
            outcomes["schema"] += 1
            continue
        answer = parse_result(encode_frame(trace.model_dump_json().encode()), 8 << 20,
                              Bounds(record.source.count("\n") + 1, record.max_steps, record.max_stdout))
        rejected = answer.error is not None and answer.error.type == "UnusableAnswer"
        outcomes["rejected" if rejected else "accepted"] += 1
        if rejected and number % 4:
            continue  # the kept steps are checked steps: a quarter of them drawn is enough
        try:
            through_the_routes(answer, record.source, svg_steps=1)
        except Exception as error:  # noqa: BLE001 - reported with the mutation that caused it
            pytest.fail(f"mutation {number} of {record.name!r} ({did}) broke a view: {error!r}")
    assert outcomes["accepted"] >= 30 and outcomes["rejected"] >= 150, outcomes


class ForgedRunner:
    def __init__(self, answer: dict) -> None:
        self.data = encode_frame(json.dumps(answer).encode())

    async def run(self, code: str) -> DeltaTrace:
        return parse_result(self.data, 8 << 20, bounds_for(code, Settings()))


HTTP_FORGED = ["values-nesting", "offset-past-storage", "dangling-name", "node-cycle"]


@pytest.fixture(params=HTTP_FORGED)
def forged(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    data, reason = next(f[1:] for f in FORGED if f[0] == request.param)
    app = create_app(Settings(data_dir=tmp_path), runner=ForgedRunner(data))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, reason


def test_a_forged_trace_is_a_clear_error_on_every_route(forged: tuple[TestClient, str]) -> None:
    client, reason = forged
    answers = {
        "/api/run": client.post("/api/run", json={"code": CODE}),
        "/api/run delta": client.post("/api/run", json={"code": CODE, "format": "delta"}),
        "/run": client.post("/run", data={"code": CODE}),
        "/embed/run": client.post("/embed/run", data={"code": CODE}),
        "/render.svg": client.get("/render.svg", params={"code": encode_code(CODE)}),
    }
    for route, response in answers.items():
        assert response.status_code == 200, (route, response.status_code, response.text[:300])
    for route in ("/api/run", "/api/run delta"):
        body = answers[route].json()
        assert body["error"]["type"] == "UnusableAnswer" and reason in body["error"]["message"], body["error"]
        assert len(body["steps"]) == 1  # the good first step is kept
        assert body["memory"], "the kept step is analysed like any other"
    for route in ("/run", "/embed/run"):
        assert "unusable answer" in answers[route].text and reason.split("'")[0] in answers[route].text
    assert answers["/render.svg"].text.startswith("<svg")


# What the golden corpus lacks: backward steps, caps, facts torch would not give, other layouts.
ENGINE_SNIPPETS = {
    "backward-and-hook": "x = torch.ones(3, requires_grad=True)\ndef h(g):\n    y = g * 2\n    return y\n"
                         "x.register_hook(h)\nz = (x * x).sum()\nz.backward()\nprint(x.grad)\n",
    "retained-twice": "x = torch.ones(2, requires_grad=True)\ny = x * 2\ny.retain_grad()\n"
                      "y.sum().backward(retain_graph=True)\ny.sum().backward()\n",
    "sparse-nested-lazy": "s = torch.eye(2).to_sparse()\nc = torch.eye(3).to_sparse_csr()\n"
                          "n = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])\n"
                          "m = nn.LazyLinear(3)\n",
    "resized-views": "a = torch.arange(6.0)\nv = a[2:]\na.untyped_storage().resize_(8)\nb = 1\n",
    "dtypes-and-views": "a = torch.ones(4)\nb = a.view(torch.int32)\nc = a.view(torch.uint8)\n"
                        "d = torch.ones(3, dtype=torch.bfloat16)\ne = torch.ones(1).expand(100)\n"
                        "q = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8)\n"
                        "r = torch.view_as_real(torch.tensor([1 - 2j, 1j]))\n",
    "numpy-bridge": "import numpy as np\nt = torch.arange(6.0)\na = t.numpy()\nb = np.asarray(t)[1:]\n"
                    "c = np.array(t)\nd = a[::-2]\ne = torch.from_numpy(np.ones(3))\na[0] = 5\n"
                    "del t\nq = 1\n",
    "past-both-caps": "ws = [torch.ones(1, requires_grad=True) for _ in range(90)]\n"
                      "ls = [w * 2 for w in ws]\ns = sum(ls)\ns.backward()\ndel ls\nq = 1\n",
}


@pytest.mark.parametrize("name", sorted(ENGINE_SNIPPETS))
def test_the_engines_own_traces_are_consistent(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.engine import snapshot, trace_delta  # torch: only the tests and the worker import it

    monkeypatch.setattr(snapshot, "MAX_TENSORS", 120)  # the real caps (20,000) take long to reach
    monkeypatch.setattr(snapshot, "MAX_NODES", 80)
    code = ENGINE_SNIPPETS[name]
    trace = DeltaTrace.model_validate(trace_delta(code))
    assert trace.ok, trace.error
    if name == "past-both-caps":
        assert {k for s in trace.steps for k in s.capped} == {"tensors", "nodes"}
        assert any(s.phase == "backward" for s in trace.steps)
    if name == "numpy-bridge":  # arrays on t's storage (views, a reversed one) and on their own buffers
        arrays = [fact for s in trace.steps for fact in s.arrays.values()]
        assert any(f.storage for f in arrays) and any(f.storage is None for f in arrays)
        assert any(any(st < 0 for st in f.strides) for f in arrays)
    assert problem(trace, bounds_for(code, Settings())) is None
