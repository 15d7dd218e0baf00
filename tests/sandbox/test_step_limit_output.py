"""A tutorial that runs past the step limit prints, through the real sandbox, everything plain torch
prints (issue 24): "Learning PyTorch with examples" fits a polynomial in 2,000 iterations and prints
every 100th loss; cut at the 10,000-step limit the explorer printed up to iteration 699 only. Now the
run goes on to its end unrecorded (``app.engine.run._Unrecorded``), within the sandbox's CPU budget,
and its last step is that end.

The snippets are the tutorial's own, at full length, against ``plain_torch.py`` in the fork server's
environment. The server's default limits (10,000 steps, 5 s of CPU) but a wall clock no busy machine
reaches: the CPU budget is the one that holds these runs (as in ``test_streaming.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_support import Server, start_server

from app.config import Settings
from app.sandbox.launch import fork_server_env

TENSORS = """\
import torch
import math

dtype = torch.float
device = torch.device("cpu")

x = torch.linspace(-math.pi, math.pi, 2000, device=device, dtype=dtype)
y = torch.sin(x)

a = torch.randn((), device=device, dtype=dtype)
b = torch.randn((), device=device, dtype=dtype)
c = torch.randn((), device=device, dtype=dtype)
d = torch.randn((), device=device, dtype=dtype)

learning_rate = 1e-6
for t in range(2000):
    y_pred = a + b * x + c * x ** 2 + d * x ** 3

    loss = (y_pred - y).pow(2).sum().item()
    if t % 100 == 99:
        print(t, loss)

    grad_y_pred = 2.0 * (y_pred - y)
    grad_a = grad_y_pred.sum()
    grad_b = (grad_y_pred * x).sum()
    grad_c = (grad_y_pred * x ** 2).sum()
    grad_d = (grad_y_pred * x ** 3).sum()

    a -= learning_rate * grad_a
    b -= learning_rate * grad_b
    c -= learning_rate * grad_c
    d -= learning_rate * grad_d


print(f'Result: y = {a.item()} + {b.item()} x + {c.item()} x^2 + {d.item()} x^3')
"""

NUMPY = """\
import numpy as np
import math

x = np.linspace(-math.pi, math.pi, 2000)
y = np.sin(x)

np.random.seed(0)  # (plain_torch.py seeds torch and random; the engine numpy too)
a = np.random.randn()
b = np.random.randn()
c = np.random.randn()
d = np.random.randn()

learning_rate = 1e-6
for t in range(2000):
    y_pred = a + b * x + c * x ** 2 + d * x ** 3

    loss = np.square(y_pred - y).sum()
    if t % 100 == 99:
        print(t, loss)

    grad_y_pred = 2.0 * (y_pred - y)
    grad_a = grad_y_pred.sum()
    grad_b = (grad_y_pred * x).sum()
    grad_c = (grad_y_pred * x ** 2).sum()
    grad_d = (grad_y_pred * x ** 3).sum()

    a -= learning_rate * grad_a
    b -= learning_rate * grad_b
    c -= learning_rate * grad_c
    d -= learning_rate * grad_d

print(f'Result: y = {a} + {b} x + {c} x^2 + {d} x^3')
"""

AUTOGRAD = """\
import torch
import math

dtype = torch.float
device = "cpu"
torch.set_default_device(device)

x = torch.linspace(-math.pi, math.pi, 2000, dtype=dtype)
y = torch.sin(x)

a = torch.randn((), dtype=dtype, requires_grad=True)
b = torch.randn((), dtype=dtype, requires_grad=True)
c = torch.randn((), dtype=dtype, requires_grad=True)
d = torch.randn((), dtype=dtype, requires_grad=True)

learning_rate = 1e-6
for t in range(2000):
    y_pred = a + b * x + c * x ** 2 + d * x ** 3

    loss = (y_pred - y).pow(2).sum()
    if t % 100 == 99:
        print(t, loss.item())

    loss.backward()

    with torch.no_grad():
        a -= learning_rate * a.grad
        b -= learning_rate * b.grad
        c -= learning_rate * c.grad
        d -= learning_rate * d.grad

        a.grad = None
        b.grad = None
        c.grad = None
        d.grad = None

print(f'Result: y = {a.item()} + {b.item()} x + {c.item()} x^2 + {d.item()} x^3')
"""

# The same loop ending in an error after the limit: torch's error, and everything printed before it.
FAILS_AT_THE_END = TENSORS.replace("print(f'Result", "z = x.view(7, -1)\nprint(f'Result")

SNIPPETS = {"tensors": TENSORS, "numpy": NUMPY, "autograd": AUTOGRAD, "fails-at-the-end": FAILS_AT_THE_END}


@pytest.fixture(scope="module")
def patient_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(tmp_path_factory.mktemp("patient"), {"EXPLORER_WALL_SECONDS": "120"})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def plain() -> dict[str, dict]:
    answer = subprocess.run([sys.executable, str(Path(__file__).with_name("plain_torch.py"))],
                            input=json.dumps(SNIPPETS), capture_output=True, text=True, env=fork_server_env(),
                            timeout=600, check=True)
    return json.loads(answer.stdout)


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_a_tutorial_past_the_step_limit_prints_what_plain_torch_prints(
        patient_server: Server, plain: dict[str, dict], name: str) -> None:
    expected = plain[name]
    result = patient_server.run(SNIPPETS[name])
    steps = result["steps"]
    printed = (steps[-1]["stdout"] if steps else "") + ((result["error"] or {}).get("output") or "")
    assert printed == expected["output"]
    assert expected["output"].count("\n") == 20 + (expected["error"] is None)  # every 100th loss, the result
    assert result["truncated"]
    if expected["error"] is None:
        assert result["ok"], result["error"]
        assert len(steps) == Settings().max_steps
        assert steps[-1]["line"] == SNIPPETS[name].rstrip("\n").count("\n") + 1  # its end: the last line
    else:
        assert [result["error"]["type"], result["error"]["message"]] == expected["error"]
        assert len(steps) == Settings().max_steps - 1
