"""The library entry (autograd_explorer) in this process: what it imports, what it shows, and the
limits it holds a run to."""

from __future__ import annotations

import base64
import json
import random
import re
import signal
import subprocess
import sys
import zlib

import pytest
import torch

import autograd_explorer as ax
from app.diagnostics import analyze
from app.engine import EngineLimits, trace_delta
from app.schema import DeltaResponse, DeltaTrace
from tests.browser_support import ROOT

SERVER_ONLY = ("fastapi", "starlette", "uvicorn", "psycopg", "psycopg_pool", "httpx", "anyio", "limits",
               "redis")
CODE = "a = torch.ones(2, 3, requires_grad=True)\nb = a.t()\nc = (b * 2).sum()\nc.backward()\nprint(a.grad)\n"


def test_importing_and_using_the_library_imports_no_server_package() -> None:
    probe = ("import sys, autograd_explorer as ax\n"
             "run = ax.trace('x = torch.ones(2)\\ny = x * 2')\n"
             "run.html(); run.svg(); run.text(); run.to_json(); run._repr_mimebundle_()\n"
             f"print(sorted(m for m in sys.modules if m.split('.')[0] in {SERVER_ONLY!r}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_mimebundle_is_offline_and_static_where_it_must_be() -> None:
    run = ax.trace(CODE, title="t")
    bundle = run._repr_mimebundle_()
    assert set(bundle) == {"text/html", "image/svg+xml", "text/plain"}
    page = run.html()
    packed = re.search(r'data-role="packed-run">([^<]+)</script>', page)
    assert packed is not None
    fragment = zlib.decompress(base64.b64decode(packed.group(1))).decode()
    assert 'data-role="run"' in fragment and "memory-timeline" in fragment
    for text in (page, fragment):
        # nothing fetched: no src/href to another document, no CSS import or url() but fragments
        assert not re.search(r"""\b(?:src|href)\s*=\s*["']?(?!#)""", text, re.IGNORECASE)
        assert not re.search(r"@import|url\((?!#)|<link\s|\bimport\s*\(", text)
    svg = bundle["image/svg+xml"]
    assert "<script" not in svg and "<foreignObject" not in svg and not re.search(r"href=\"(?!#)", svg)
    # 5 lines, and a step for each of the 4 nodes backward ran
    assert bundle["text/plain"].splitlines()[0] == "Autograd Explorer · t · 9 steps · finished"
    assert run.output == "tensor([[2., 2., 2.],\n        [2., 2., 2.]])\n"


def test_to_json_is_what_the_api_answers(tmp_path) -> None:  # noqa: ANN001
    run = ax.trace(CODE)
    answer = DeltaResponse.model_validate_json(run.to_json())
    assert answer == analyze(run.trace, CODE)
    assert len(answer.steps) == run.steps == len(trace_delta(CODE, EngineLimits())["steps"])
    for suffix in ("html", "svg", "txt", "json"):
        run.save(tmp_path / f"run.{suffix}")
    assert (tmp_path / "run.html").read_text() == run.html()
    assert (tmp_path / "run.txt").read_text() == run.text()
    with pytest.raises(ValueError, match="unknown format"):
        run.save(tmp_path / "run.png")


def test_a_run_draws_the_playgrounds_numbers_and_leaves_the_callers_generators() -> None:
    torch.manual_seed(123)
    random.seed(5)
    expected = torch.rand(2), random.random()
    torch.manual_seed(123)
    random.seed(5)
    run = ax.trace("x = torch.rand(3)")
    assert (torch.rand(2), random.random())[1] == expected[1]
    torch.manual_seed(123)
    ax.trace("x = torch.rand(3)")
    assert torch.equal(torch.rand(2), expected[0])
    server = DeltaTrace.model_validate(trace_delta("x = torch.rand(3)", EngineLimits()))
    assert run.trace.steps[0].tensors == server.steps[0].tensors  # seeded as the sandbox seeds it


def test_the_wall_clock_stops_a_run_and_the_signal_is_given_back() -> None:
    before = signal.getsignal(signal.SIGALRM)
    # (steps enough that only the clock can stop it: a fast machine takes 10,000 in under 0.5 s)
    run = ax.trace("x = torch.zeros(1)\nwhile True:\n    x += 1",
                   limits=ax.Limits(wall_seconds=0.5, max_steps=10**7))
    assert run.trace.error is not None and run.trace.error.kind == "timeout"
    assert run.trace.error.code == "timeout.wall_shown"
    assert run.steps > 1 and not run.ok
    assert "stopped at the 0.5 s limit" in run.text()
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_the_step_and_size_limits_cut_as_the_server_cuts() -> None:
    run = ax.trace("for i in range(100):\n    x = torch.ones(3) * i", limits=ax.Limits(max_steps=20))
    assert run.steps == 20 and run.trace.truncated and run.trace.error is None
    code = "xs = []\nfor i in range(300):\n    xs.append(torch.ones(2) * i)"
    big = ax.trace(code, limits=ax.Limits(max_result_bytes=40_000))
    error = big.trace.error
    assert error is not None and error.code == "output.trace_cut" and big.trace.truncated
    # where the sandbox's child cuts the same steps: each encoded as it writes them, under the cap
    # less its envelope's room
    from app.sandbox.child import _encode

    sizes = [len(_encode(step)) + 1 for step in trace_delta(code, EngineLimits())["steps"]]
    fits = max(n for n in range(len(sizes) + 1) if sum(sizes[:n]) <= 40_000 - 8192)
    assert 0 < big.steps == fits == error.params["steps"] < len(sizes)


def test_the_runs_json_round_trips() -> None:
    run = ax.trace("x = torch.arange(4.).view(2, 2)")
    data = json.loads(run.to_json())
    assert data["format"] == "delta" and data["ok"] is True and len(data["memory"]) == len(data["steps"]) == 1


def test_gpu_code_runs_on_the_cpu_when_asked() -> None:
    """The article's GPU loop pasted unchanged (``cuda_on_cpu``: the engine's option)."""
    from dataclasses import fields

    if "cuda_on_cpu" not in {f.name for f in fields(EngineLimits)}:
        with pytest.raises(NotImplementedError):
            ax.trace("x = torch.ones(2).cuda()", cuda_on_cpu=True)
        pytest.skip("the engine has no cuda_on_cpu option yet")
    code = ("device = torch.device('cuda')\n"
            "w = torch.randn(4, requires_grad=True, device=device)\n"
            "x = torch.ones(4).to('cuda')\n"
            "loss = (w * x).sum()\n"
            "loss.backward()\n")
    run = ax.trace(code, cuda_on_cpu=True)
    assert run.ok, run.trace.error
    last = run.trace.steps[-1]
    devices = {fact.device for step in run.trace.steps for fact in step.tensors.values()}
    assert devices and all(d.startswith("cuda") for d in devices), devices
    assert run.measured is None  # a simulated device measures nothing
    assert last.line == 5 and run.trace.cuda_on_cpu
    assert "cuda ran on the CPU here" in run.text().split("\n\n")[0]  # the summary says so
