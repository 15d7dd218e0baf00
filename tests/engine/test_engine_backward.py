"""Backward steps (issue 13): one step per autograd node torch ran, in torch's order, with the
gradients it received and sent — held against torch itself, observed with its own node hooks in a
plain run — and the state right after each node (``.grad`` filled, saved tensors freed)."""

from __future__ import annotations

import io
import math
from contextlib import redirect_stderr, redirect_stdout

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from app.engine import EngineLimits, trace_delta
from app.schema import DeltaTrace
from app.trace.delta import expand

CASES = {
    "one path": """
x = torch.tensor([1., 2.], requires_grad=True)
y = x.sigmoid()
z = (y * y).sum()
z.backward()
""",
    "mlp step": """
model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
x, y = torch.randn(5, 3), torch.randn(5, 1)
loss = F.mse_loss(model(x), y)
loss.backward()
""",
    "two backward calls with retain_graph": """
w = torch.tensor([1., -1., 2.], requires_grad=True)
out = (w.exp() * w).sum()
out.backward(retain_graph=True)
out.backward()
""",
    "torch.autograd.grad": """
x = torch.tensor([0.5, 1.5], requires_grad=True)
y = (x ** 3).sum()
(g,) = torch.autograd.grad(y, x)
""",
    "two paths into one leaf": """
a = torch.tensor([1., 2., 3.], requires_grad=True)
b = a * 2
c = a.sin()
(b + c).sum().backward()
""",
    "inside a function": """
def train(w):
    loss = (w * w).sum()
    loss.backward()
    return loss.item()

w = torch.tensor([3., -1.], requires_grad=True)
value = train(w)
""",
    "create_graph and a second order grad": """
x = torch.tensor(2.0, requires_grad=True)
y = x ** 4
(g,) = torch.autograd.grad(y, x, create_graph=True)
g.backward()
""",
}


def _code(source: str) -> str:
    return source.strip("\n") + "\n"


def hooked_plain(source: str) -> list[list[tuple[str, list]]]:
    """Run plainly; torch's own post hooks on every node of every backward pass record
    (node name, gradients it sent), in the order torch ran them — one list per pass."""
    passes: list[list[tuple[str, list]]] = []
    import torch.autograd as autograd

    original = autograd._engine_run_backward  # backward() and autograd.grad call it by this name

    def watched(t_outputs, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        ran: list[tuple[str, list]] = []
        handles = []
        seen: set[int] = set()
        stack = [t.grad_fn if isinstance(t, torch.Tensor) else t.node for t in t_outputs]
        while stack:
            node = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            handles.append(node.register_hook(
                lambda gi, go, n=node: ran.append((type(n).__name__, [_values(g) for g in gi]))))
            stack.extend(fn for fn, _ in node.next_functions)
        try:
            return original(t_outputs, *args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()
            passes.append(ran)

    autograd._engine_run_backward = watched
    try:
        torch.manual_seed(0)
        namespace = {"torch": torch, "nn": nn, "F": F, "math": math, "__name__": "__main__"}
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            exec(compile(source, "<plain>", "exec"), namespace)  # noqa: S102
    finally:
        autograd._engine_run_backward = original
    return passes


def _values(g: torch.Tensor | None) -> list | float | None:
    return None if g is None else g.detach().tolist()


def engine_passes(source: str, **limits) -> tuple[dict, list[list[tuple[str, list]]]]:
    trace = expand(DeltaTrace.model_validate(trace_delta(source, EngineLimits(**limits)))).model_dump()
    passes: list[list[tuple[str, list]]] = []
    previous = "forward"
    for step in trace["steps"]:
        if step["phase"] == "backward":
            if previous != "backward":
                passes.append([])
            node = step["nodes"][step["node"]]
            sent = [None if tid is None else step["tensors"][tid]["values"] for tid in step["sent"]]
            passes[-1].append((node["name"], sent))
        previous = step["phase"]
    return trace, passes


def _close(a, b) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7)


@pytest.mark.parametrize("name", CASES)
def test_node_order_and_sent_gradients_are_torchs(name: str) -> None:
    source = _code(CASES[name])
    trace, got = engine_passes(source)
    assert trace["ok"], trace["error"]
    want = hooked_plain(source)
    assert [[n for n, _ in p] for p in got] == [[n for n, _ in p] for p in want]
    for mine, theirs in zip(got, want, strict=True):
        for (node, sent), (_, expected) in zip(mine, theirs, strict=True):
            assert _close(sent, expected), (node, sent, expected)


@pytest.mark.parametrize("name", CASES)
def test_the_run_ends_as_a_plain_run(name: str) -> None:
    """Watching backward changes no result: the last step's leaf grads are a plain run's."""
    source = _code(CASES[name])
    trace, _ = engine_passes(source)
    torch.manual_seed(0)
    namespace = {"torch": torch, "nn": nn, "F": F, "math": math, "__name__": "__main__"}
    exec(compile(source, "<plain>", "exec"), namespace)  # noqa: S102
    last = trace["steps"][-1]
    for var, tid in last["variables"].items():
        tensor = namespace.get(var)
        if not isinstance(tensor, torch.Tensor):
            continue
        fact = last["tensors"][tid]
        if tensor.grad is None:
            assert fact["grad"] is None, var
        else:
            grad = last["tensors"][fact["grad"]]
            assert _close(grad["values"], tensor.grad.tolist()), var
            assert grad["version"] == tensor.grad._version, var


def test_a_backward_step_shows_the_state_right_after_its_node() -> None:
    trace, _ = engine_passes(_code(CASES["one path"]))
    steps = [s for s in trace["steps"] if s["phase"] == "backward"]
    names = [s["nodes"][s["node"]]["name"] for s in steps]
    assert names == ["SumBackward0", "MulBackward0", "SigmoidBackward0", "AccumulateGrad"]
    x = trace["steps"][0]["variables"]["x"]
    mul = steps[1]
    assert set(mul["nodes"][mul["node"]]["saved_errors"]) == {"self", "other"}  # freed as it finishes
    assert steps[2]["tensors"][x]["grad"] is None  # .grad arrives with AccumulateGrad, not before
    assert steps[3]["tensors"][x]["grad"] is not None
    assert steps[3]["received"] and steps[3]["sent"] == []
    assert all(s["line"] == 4 for s in steps) and trace["steps"][-1]["phase"] == "forward"
    # every gradient a step names is in that step
    for step in steps:
        assert all(t in step["tensors"] for t in step["received"] + step["sent"] if t is not None)


def test_retain_graph_keeps_saved_tensors_and_the_second_pass_frees_them() -> None:
    trace, passes = engine_passes(_code(CASES["two backward calls with retain_graph"]))
    assert len(passes) == 2
    first = [s for s in trace["steps"] if s["phase"] == "backward" and s["line"] == 3]
    second = [s for s in trace["steps"] if s["phase"] == "backward" and s["line"] == 4]
    assert all(not s["nodes"][s["node"]]["saved_errors"] for s in first)
    assert any(s["nodes"][s["node"]]["saved_errors"] for s in second)


def test_an_error_inside_backward_keeps_the_steps_before_it() -> None:
    source = _code("""
x = torch.tensor([1., 2.], requires_grad=True)
y = x * 2
def boom(grad):
    raise ValueError("from a hook")
y.register_hook(boom)
z = (y * 3).sum()
z.backward()
""")
    trace, passes = engine_passes(source)
    # the error is the hook's (line 4, the deepest snippet line), raised through backward() at line 7
    assert trace["ok"] is False and trace["error"]["type"] == "ValueError" and trace["error"]["line"] == 4
    assert [n for n, _ in passes[0]] == ["SumBackward0", "MulBackward0"]  # the hook on y fired next


def test_hook_output_lands_in_the_step_of_its_node() -> None:
    source = _code("""
x = torch.tensor([1., 2.], requires_grad=True)
y = x * 2
y.register_hook(lambda g: print("grad at y", g.tolist()))
y.sum().backward()
""")
    trace, _ = engine_passes(source)
    before = ""
    printed = []
    for step in trace["steps"]:  # v1 output is everything printed so far: what did this step add?
        if step["phase"] == "backward" and "grad at y" in step["stdout"][len(before):]:
            printed.append(step)
        before = step["stdout"]
    assert len(printed) == 1
    # the hook runs as the gradient reaches y, i.e. after SumBackward0 sent it
    assert printed[0]["nodes"][printed[0]["node"]]["name"] in ("SumBackward0", "MulBackward0")


def test_backward_steps_count_toward_the_step_limit() -> None:
    source = _code(CASES["mlp step"])
    full, _ = engine_passes(source)
    cut, _ = engine_passes(source, max_steps=6)
    assert cut["truncated"] and len(cut["steps"]) == 6
    # five recorded, then the run's end (it ran on past the limit), as the full run ends
    assert [s["line"] for s in cut["steps"][:5]] == [s["line"] for s in full["steps"][:5]]
    assert cut["steps"][-1]["phase"] == "forward" and cut["steps"][-1]["line"] == full["steps"][-1]["line"]
