"""``POST /api/run`` and ``GET /healthz`` through the real app and its default runner.

Runner-agnostic on purpose: these check the HTTP contract (status codes, the RunResult shape, errors
as data), not how or where the snippet ran.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from app.config import Settings
from app.schema import RunResult

ROOT = Path(__file__).resolve().parents[2]


def _run(client: TestClient, code: str) -> dict:
    response = client.post("/api/run", json={"code": code})
    assert response.status_code == 200, response.text
    body = response.json()
    RunResult.model_validate({k: body[k] for k in RunResult.model_fields})  # the fixed contract
    return body


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["ok"] is True


def test_a_snippet_runs_and_returns_every_step(client: TestClient) -> None:
    body = _run(client, "x = torch.ones(3, requires_grad=True)\ny = x.clone()\nz = x.detach()\n")
    assert (body["ok"], body["truncated"], body["error"]) == (True, False, None)
    assert [step["line"] for step in body["steps"]] == [1, 2, 3]
    last = body["steps"][-1]
    x, y, z = (last["tensors"][last["variables"][name]] for name in ("x", "y", "z"))
    assert z["storage"] == x["storage"] != y["storage"]
    assert last["nodes"][y["grad_fn"]]["name"] == "CloneBackward0"


def test_a_runtime_error_is_data_with_its_line_and_the_steps_before_it(client: TestClient) -> None:
    body = _run(client, "x = torch.ones(3, requires_grad=True)\ny = x * 2\nx.add_(1)\n")
    assert body["ok"] is False
    assert body["error"]["kind"] == "runtime"
    assert body["error"]["type"] == "RuntimeError"
    assert body["error"]["line"] == 3
    assert "leaf Variable that requires grad" in body["error"]["message"]
    assert [step["line"] for step in body["steps"]] == [1, 2]


def test_a_syntax_error_is_rejected_with_its_line(client: TestClient) -> None:
    body = _run(client, "x = torch.ones(2)\ny = (x +\n")
    assert body["ok"] is False and body["steps"] == []
    assert body["error"]["kind"] == "rejected"
    assert body["error"]["line"] == 2


def test_a_malformed_body_is_a_clear_client_error(client: TestClient) -> None:
    padding = "A" * 5000
    bodies = [
        b"{not json",
        b"",
        b"\xff\xfe\x00",
        b'{"source": "x = 1"}',
        b'{"code": 42}',
        b'{"code": "x = 1", "extra": true}',
        b"[]",
        f'{{"code": null, "pad": "{padding}"}}'.encode(),
    ]
    for content in bodies:
        response = client.post("/api/run", content=content, headers={"Content-Type": "application/json"})
        assert 400 <= response.status_code < 500, (content[:40], response.status_code)
        detail = response.json()
        assert detail.get("problems") or detail.get("detail"), content[:40]
        assert padding not in response.text  # names the problem without echoing the body back


def test_oversized_code_is_refused_with_413(client: TestClient) -> None:
    limit = Settings().max_code_bytes
    response = client.post("/api/run", json={"code": "x = 1\n" + "#" * limit})
    assert response.status_code == 413
    body = response.json()
    assert body["ok"] is False and body["error"]["kind"] == "rejected"


def test_the_web_layer_does_not_import_torch() -> None:
    check = "import app.web.main, sys; assert 'torch' not in sys.modules, 'torch was imported'"
    completed = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0, completed.stderr


def test_large_traces_travel_gzipped(client: TestClient) -> None:
    code = "w = torch.ones(8, requires_grad=True)\nfor i in range(20):\n    loss = (w * i).sum()\n"
    response = client.post("/api/run", json={"code": code}, headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    assert response.headers["content-encoding"] == "gzip"
    # content-length counts the bytes sent; httpx hands back the decoded body
    assert int(response.headers["content-length"]) < len(response.content) / 5
    assert len(response.json()["steps"]) == 42
