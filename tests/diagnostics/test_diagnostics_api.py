"""POST /api/run answers the trace plus the server's own diagnostics and memory accounting, and the
playground fragment shows both. The runner is the real engine, in process (the sandbox has its own
tests); the worker's output can carry no diagnostics of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from diagnostics_support import code_of
from fastapi.testclient import TestClient

from app.config import Settings
from app.engine import trace_delta, trace_snippet
from app.gallery import get_example
from app.sandbox.frames import encode_frame
from app.sandbox.runner import parse_result
from app.schema import DeltaTrace
from app.web.main import create_app


class InProcessRunner:
    """The engine without a sandbox: same trace validation as the real runners."""

    async def run(self, code: str) -> DeltaTrace:
        return DeltaTrace.model_validate(trace_delta(code))


@pytest.fixture
def client(tmp_path: Path):  # noqa: ANN201
    app = create_app(Settings(data_dir=tmp_path / "data", database_url=None), runner=InProcessRunner())
    with TestClient(app) as client:
        yield client


def test_api_returns_trace_diagnostics_and_memory(client: TestClient) -> None:
    code = get_example("losses-keep-graphs").code
    body = client.post("/api/run", json={"code": code}).json()
    assert {"ok", "truncated", "error", "steps", "diagnostics", "memory"} <= set(body)
    assert body["ok"] is True and len(body["memory"]) == len(body["steps"])
    [d] = body["diagnostics"]
    assert (d["rule"], d["line"], d["severity"]) == ("graph-kept-by-container", 5, "warning")
    last = body["memory"][-1]
    assert last["total_bytes"] == sum(s["nbytes"] for s in body["steps"][-1]["storages"].values())
    # The existing fields are unchanged: the same trace the engine produced.
    assert body["steps"] == json.loads(json.dumps(trace_snippet(code)["steps"]))


def test_api_explains_runtime_errors(client: TestClient) -> None:
    body = client.post("/api/run", json={"code": code_of("""
        w = torch.ones(3, requires_grad=True)
        w.add_(1)
    """)}).json()
    assert body["ok"] is False and [d["rule"] for d in body["diagnostics"]] == ["inplace-on-leaf"]


def test_worker_cannot_supply_diagnostics() -> None:
    forged = dict(trace_delta("x = torch.ones(2)\n"))
    forged["diagnostics"] = [{"rule": "graph-kept-by-container", "severity": "error", "title": "pwned",
                              "message": "<script>", "fix": ""}]
    result = parse_result(encode_frame(json.dumps(forged).encode()), 1 << 20)
    assert result.ok is False and result.error is not None and result.error.kind == "internal"


def test_playground_fragment_shows_panel_and_timeline(client: TestClient) -> None:
    html = client.post("/run", data={"code": get_example("inplace-through-detach").code}).text
    assert 'data-testid="diagnostics" data-count="1"' in html
    assert 'data-rule="saved-tensor-modified"' in html and 'data-testid="memory-timeline"' in html


def test_diagnostics_and_their_views_never_import_torch() -> None:
    import subprocess
    import sys

    check = ("import sys, app.diagnostics, app.render.findings, app.render.compare, app.web.api; "
             "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", check], check=True, cwd=Path(__file__).resolve().parents[2])
