"""A schema-valid trace whose parts disagree (a forged answer: a child can write any frame) never
makes a route answer 500: every route that analyses or draws it answers a clear partial result.

The runner here stands in for a hostile child: it hands the server exactly the bytes such a child
could send, through the same ``parse_result`` the pool uses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.sandbox.frames import encode_frame
from app.sandbox.runner import parse_result
from app.schema import RunResult
from app.web.main import create_app
from app.web.permalink import encode_code

TENSOR = {
    "shape": [2, 3], "dtype": "float32", "stride": [1], "storage_offset": 0, "storage": "s1",
    "requires_grad": False, "is_leaf": True, "grad_fn": None, "grad": None, "base": None,
    "version": 0, "values": [[1.0, 2.0]],
}
STEP = {
    "line": 1, "stdout": "", "variables": {"x": "t1"}, "tensors": {"t1": TENSOR},
    "storages": {"s1": {"nbytes": 8, "element_size": 4, "dtype": "float32", "values": [1.0, 2.0]}},
    "nodes": {},
}
FORGED = [
    {"ok": True, "steps": [STEP]},  # shape 2x3, a stride for one dimension, values for two
    {"ok": True, "steps": [{**STEP, "tensors": {"t1": {**TENSOR, "stride": [3, 1], "storage_offset": 10**9}}}]},  # noqa: E501
    {"ok": True, "steps": [{**STEP, "variables": {"x": "t9"}}]},  # a name for a tensor that is not there
]


class ForgedRunner:
    def __init__(self, answer: dict) -> None:
        self.data = encode_frame(json.dumps(answer).encode())

    async def run(self, code: str) -> RunResult:
        return parse_result(self.data, 8 << 20)


@pytest.fixture(params=range(len(FORGED)), ids=["stride-rank", "offset-past-storage", "dangling-name"])
def forged(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(Settings(data_dir=tmp_path), runner=ForgedRunner(FORGED[request.param]))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_a_forged_trace_never_answers_500(forged: TestClient) -> None:
    code = "x = torch.ones(2, 3)\n"
    answers = {
        "/api/run": forged.post("/api/run", json={"code": code}),
        "/run": forged.post("/run", data={"code": code}),
        "/embed/run": forged.post("/embed/run", data={"code": code}),
        "/render.svg": forged.get("/render.svg", params={"code": encode_code(code)}),
    }
    for route, response in answers.items():
        assert response.status_code < 500, (route, response.status_code, response.text[:300])
    assert answers["/render.svg"].text.startswith("<svg")
