"""Past its step limit a run goes on to its end: the steps after the limit are not recorded, the last
step is where the run ended (read whole), and the output is everything a plain run prints.

Issue 24: PyTorch's "Learning PyTorch with examples" fits a polynomial in a 2000-iteration loop that
prints every 100th loss; cut at the step limit, the explorer printed only up to iteration 699. torch
(``run_plain``) is the oracle: same output, same error, same tensors at the end."""

from __future__ import annotations

import pytest
from torch_oracle import assert_same_as_plain, run_plain, trace

from app.engine import EngineLimits, trace_delta
from app.schema import DeltaTrace
from app.trace.delta import expand
from tests.engine.test_engine_golden import canonical, normalised
from tests.engine.test_engine_incremental import _mask_workspaces

# The tutorial's tensor version, shortened (200 iterations, every 20th printed): ~1,400 steps.
POLYNOMIAL = """\
x = torch.linspace(-math.pi, math.pi, 200)
y = torch.sin(x)
a = torch.randn(())
b = torch.randn(())
c = torch.randn(())
d = torch.randn(())
learning_rate = 1e-6
for t in range(200):
    y_pred = a + b * x + c * x ** 2 + d * x ** 3
    loss = (y_pred - y).pow(2).sum().item()
    if t % 20 == 19:
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

# The autograd version: a backward pass per iteration, each with its node steps (none past the limit).
AUTOGRAD = """\
x = torch.linspace(-math.pi, math.pi, 50)
y = torch.sin(x)
a = torch.randn((), requires_grad=True)
b = torch.randn((), requires_grad=True)
history = []
for t in range(60):
    y_pred = a + b * x
    loss = (y_pred - y).pow(2).sum()
    if t % 10 == 9:
        print(t, loss.item())
    loss.backward()
    with torch.no_grad():
        a -= 1e-3 * a.grad
        b -= 1e-3 * b.grad
        a.grad = None
        b.grad = None
    history.append(loss)
print(a, b, len(history))
"""

# The limit reached inside a function the loop calls, and a hook that prints during backward.
IN_A_FUNCTION = """\
def step(w, i):
    out = (w * i).sum()
    out.backward()
    return out.item()

w = torch.ones(3, requires_grad=True)
w.register_hook(lambda g: print('grad', g.tolist()))
total = 0.0
for i in range(40):
    total += step(w, i)
print(total, w.grad)
"""

# Kept graphs whose saved outputs the last step reads (relu saves its result): held in a list.
KEPT = """\
a = torch.randn(8, requires_grad=True)
kept = []
for i in range(150):
    out = (a * i).relu().mean()
    kept.append(out)
    if i % 50 == 0:
        print(i, out.item())
last = kept[-1]
"""


@pytest.mark.parametrize(("source", "limit"), [(POLYNOMIAL, 300), (AUTOGRAD, 200), (IN_A_FUNCTION, 60),
                                               (KEPT, 100)], ids=["tensors", "autograd", "function", "kept"])
def test_a_run_past_its_limit_prints_everything_and_ends_as_plain_torch(source: str, limit: int) -> None:
    result = assert_same_as_plain(source, max_steps=limit)  # output, error, final tensors: torch's
    assert result["truncated"] and len(result["steps"]) == limit
    # the last step is the end of the run: after the snippet's last line, at module level
    last = result["steps"][-1]
    assert last["line"] == source.rstrip("\n").count("\n") + 1 and last["phase"] == "forward"
    assert not any(":" in name for name in last["variables"])


def _delta(source: str, **limits: int) -> dict:
    """The delta trace (each step what changed: comparable step by step without expanding)."""
    return DeltaTrace.model_validate(trace_delta(source, EngineLimits(**limits))).model_dump()


def test_the_recorded_steps_are_those_of_an_unlimited_run() -> None:
    whole = _delta(AUTOGRAD, max_steps=100_000)
    cut = _delta(AUTOGRAD, max_steps=200)
    assert not whole["truncated"] and len(whole["steps"]) > 400
    assert cut["steps"][:199] == whole["steps"][:199]
    end, plain_end = (expand(DeltaTrace.model_validate(run)).steps[-1] for run in (cut, whole))
    assert end.variables.keys() == plain_end.variables.keys() and end.stdout == plain_end.stdout


def test_a_run_that_ends_at_its_limit_is_whole() -> None:
    whole = _delta(KEPT, max_steps=100_000)
    count = len(whole["steps"])
    exact = _delta(KEPT, max_steps=count)
    assert not exact["truncated"] and exact["steps"] == whole["steps"]
    one_less = _delta(KEPT, max_steps=count - 1)
    assert one_less["truncated"] and len(one_less["steps"]) == count - 1
    assert "".join(step["stdout"] for step in one_less["steps"]) == run_plain(KEPT).stdout


def test_an_error_past_the_limit_is_torch_s_with_all_the_output_before_it() -> None:
    source = POLYNOMIAL.replace("print(f'Result", "z = x.view(7, -1)\nprint(f'Result")
    result, plain = trace(source, max_steps=300), run_plain(source)
    assert result["truncated"] and len(result["steps"]) == 299  # the recorded ones: no end to show
    error = result["error"]
    assert (error["type"], error["message"], error["line"]) == (type(plain.error).__name__, str(plain.error),
                                                                plain.error_line)
    assert result["steps"][-1]["stdout"] + error["output"] == plain.stdout
    assert plain.stdout.count("\n") == 10


def test_a_snippet_that_catches_everything_runs_on_past_the_limit() -> None:
    """Nothing is raised into the snippet at the limit any more: its ``except BaseException`` changes
    nothing."""
    source = """\
count = 0
for i in range(300):
    try:
        count += 1
    except BaseException:
        count = -1000
print(count)
"""
    result = assert_same_as_plain(source, max_steps=50)
    assert result["truncated"] and result["steps"][-1]["stdout"] == "300\n"


@pytest.mark.parametrize(("source", "limit"), [(POLYNOMIAL, 300), (AUTOGRAD, 200), (IN_A_FUNCTION, 60),
                                               (KEPT, 100)], ids=["tensors", "autograd", "function", "kept"])
def test_incremental_equals_whole_past_the_limit(source: str, limit: int) -> None:
    def read(full: bool) -> dict:
        raw = trace_delta(source, EngineLimits(max_steps=limit, full_snapshots=full))
        v1 = _mask_workspaces(expand(DeltaTrace.model_validate(raw)).model_dump())
        return canonical(normalised(v1, source))

    incremental, whole = read(False), read(True)
    assert incremental["truncated"] and whole["truncated"]
    for index, (a, b) in enumerate(zip(incremental["steps"], whole["steps"], strict=True)):
        assert a == b, f"step {index} (line {b['line']}) differs"


def test_the_cap_on_unrecorded_steps_stops_an_endless_loop_where_it_is() -> None:
    result = trace("x = torch.zeros(1)\nwhile True:\n    x += 1\n", max_steps=10, max_unrecorded=21)
    assert result["ok"] and result["truncated"] and len(result["steps"]) == 10
    # steps 1-9 recorded (x is 4 after the ninth), 21 more ran unrecorded: the 22nd, the 31st step of
    # the run ("x += 1" for the 15th time), is the last
    last = result["steps"][-1]
    assert last["line"] == 3 and last["tensors"][last["variables"]["x"]]["values"] == [15.0]
