"""The cuda-on-CPU option through the real server and sandbox (issue 24, 5): ``"cuda_on_cpu": true`` in
``POST /api/run``, the playground's toggle (its form field, ``?cuda=1``), the embed's ``&cuda=1``; the
answer says it was simulated exactly when it was asked for, whatever the child writes."""

from __future__ import annotations

import re

import pytest
from sandbox_support import Server

from app.sandbox.runner import as_asked
from app.schema import DeltaResponse, DeltaTrace, RunResponse
from app.web.permalink import encode_code

GPU_LOOP = """\
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(3, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    x = torch.randn(4, 3).cuda()
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(x.device, loss.is_cuda, torch.cuda.memory_allocated() > 0)
"""


def api(server: Server, body: dict) -> dict:
    response = server.client.post("/api/run", json=body)
    assert response.status_code == 200, response.text[:500]
    return response.json()


@pytest.mark.parametrize("form", ["delta", "v1"])
def test_the_api_runs_gpu_code_on_the_cpu_when_asked(gated_server: Server, form: str) -> None:
    answer = api(gated_server, {"code": GPU_LOOP, "format": form, "cuda_on_cpu": True})
    (DeltaResponse if form == "delta" else RunResponse).model_validate(answer)
    assert answer["ok"], answer["error"]
    assert answer["cuda_on_cpu"] is True
    printed = "".join(step["stdout"] for step in answer["steps"]) if form == "delta" else \
        answer["steps"][-1]["stdout"]
    assert printed == "cuda:0 True True\n"
    shown = {fact["device"] for step in answer["steps"] for fact in step["tensors"].values()}
    assert shown == {"cuda:0"}


def test_without_the_option_the_api_says_how_to_ask(gated_server: Server) -> None:
    answer = api(gated_server, {"code": GPU_LOOP, "format": "delta"})
    assert answer["cuda_on_cpu"] is False
    assert answer["error"]["code"] == "runtime.no_cuda" and answer["error"]["line"] == 5  # x.cuda()


def test_the_answer_says_what_was_asked_not_what_the_child_wrote() -> None:
    claimed = DeltaTrace(ok=True, steps=[], cuda_on_cpu=True)
    assert as_asked(claimed, False).cuda_on_cpu is False
    assert as_asked(DeltaTrace(ok=True, steps=[]), True).cuda_on_cpu is True


def test_the_playground_toggle_and_its_link(gated_server: Server) -> None:
    client = gated_server.client
    page = client.get("/", params={"code": encode_code(GPU_LOOP), "cuda": "1"}).text
    assert re.search(r'name="cuda_on_cpu" value="1" data-testid="cuda-on-cpu"\s+checked', page)
    assert not re.search(r'data-testid="cuda-on-cpu"\s+checked', client.get("/").text)
    ran = client.post("/run", data={"code": GPU_LOOP, "cuda_on_cpu": "1"}).text
    assert 'data-testid="cuda-notice"' in ran and 'data-testid="error"' not in ran
    plain = client.post("/run", data={"code": GPU_LOOP}).text
    assert 'data-testid="cuda-notice"' not in plain and "Run cuda on the CPU" in plain


def test_the_embed_runs_cuda_on_the_cpu_with_its_parameter(gated_server: Server) -> None:
    client = gated_server.client
    token = encode_code(GPU_LOOP)
    page = client.get("/embed", params={"code": token, "cuda": "1"}).text
    assert '<input type="hidden" name="cuda_on_cpu" value="1">' in page
    assert f"/?code={token}&amp;cuda=1" in page  # "Open in playground" keeps the option
    ran = client.post("/embed/run", data={"code": GPU_LOOP, "view": "both", "cuda_on_cpu": "1"}).text
    assert 'data-testid="cuda-notice"' in ran
    svg = client.get("/render.svg", params={"code": token, "cuda": "1"})
    assert svg.status_code == 200 and "Torch not compiled" not in svg.text
    assert client.get("/render.svg", params={"code": token}).headers["etag"] != svg.headers["etag"]
