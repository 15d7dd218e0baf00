"""What counts as a step, and how a run ends: limits, errors, output."""

from __future__ import annotations

import pytest
from torch_oracle import lines, run_plain, step_after, trace

import app.engine.snapshot as snapshot


def test_each_loop_iteration_is_its_own_step() -> None:
    source = """\
total = torch.zeros(1)
for i in range(3):
    total += i
print(total)
"""
    result = trace(source)
    # Like Python Tutor: the loop header is revisited before each iteration and once to leave.
    assert lines(result) == [1, 2, 3, 2, 3, 2, 3, 2, 4]
    versions = [s["tensors"][s["variables"]["total"]]["version"] for s in result["steps"] if s["line"] == 3]
    assert versions == [1, 2, 3]


def test_each_line_inside_a_function_is_its_own_step_with_its_locals() -> None:
    source = """\
def double_sum(t):
    y = t * 2
    return y.sum()

x = torch.ones(2, requires_grad=True)
s = double_sum(x)
"""
    result = trace(source)
    assert lines(result) == [1, 5, 2, 3, 6]
    inside = step_after(result, 2)
    assert inside["variables"]["double_sum:t"] == inside["variables"]["x"]
    assert "double_sum:y" in inside["variables"]
    assert not any(":" in name for name in step_after(result, 6)["variables"])


def test_a_comprehension_is_one_step() -> None:
    result = trace("xs = [torch.full((1,), float(i)) for i in range(4)]\nn = len(xs)\n")
    assert lines(result) == [1, 2]
    assert {f"xs[{i}]" for i in range(4)} <= set(result["steps"][0]["variables"])


def test_print_output_is_captured_cumulatively() -> None:
    source = """\
print('a')
x = 1
print(torch.tensor([1.5, 2.0]))
"""
    result = trace(source)
    assert [s["stdout"] for s in result["steps"]] == ["a\n", "a\n", run_plain(source).stdout]
    assert result["steps"][-1]["stdout"] == "a\ntensor([1.5000, 2.0000])\n"


def test_step_limit_truncates_without_an_error() -> None:
    # (an endless loop: stopped where its unrecorded steps pass the cap, as a caller with no clock asks)
    result = trace("x = torch.zeros(1)\nwhile True:\n    x += 1\n", max_steps=10, max_unrecorded=0)
    assert result["ok"] is True and result["truncated"] is True and result["error"] is None
    assert len(result["steps"]) == 10


def test_the_snippet_cannot_swallow_the_step_limit() -> None:
    source = """\
for i in range(100):
    try:
        x = torch.full((1,), float(i))
    except Exception:
        pass
"""
    result = trace(source, max_steps=7, max_unrecorded=5)
    assert result["truncated"] and result["ok"] and len(result["steps"]) == 7
    # six recorded, five more ran, the sixth past them ends it: the run's 12th step, line 3 with i = 3
    last = result["steps"][-1]
    assert last["line"] == 3 and last["tensors"][last["variables"]["x"]]["values"] == [3.0]


def test_a_run_within_the_limit_is_not_truncated() -> None:
    result = trace("x = 1\ny = 2\n", max_steps=2)
    assert (result["ok"], result["truncated"], len(result["steps"])) == (True, False, 2)


@pytest.mark.parametrize(
    ("source", "line"),
    [("x = torch.ones(2)\ny = (x +\n", 2), ("x = 1\n  y = 2\n", 2), ("for i in range(3)\n    pass\n", 1)],
)
def test_a_syntax_error_is_rejected_with_its_line(source: str, line: int) -> None:
    result = trace(source)
    assert result["ok"] is False and result["steps"] == []
    assert result["error"]["kind"] == "rejected"
    assert result["error"]["line"] == line
    with pytest.raises(SyntaxError) as raised:
        compile(source, "<plain>", "exec")
    assert result["error"]["type"] == type(raised.value).__name__


def test_a_runtime_error_keeps_the_steps_before_it() -> None:
    source = """\
x = torch.ones(3, requires_grad=True)
y = x * 2
x.add_(1)
z = 3
"""
    result = trace(source)
    plain = run_plain(source)
    assert lines(result) == [1, 2]
    assert result["ok"] is False
    assert result["error"] == {
        "kind": "runtime", "type": "RuntimeError", "message": str(plain.error), "line": 3, "output": "",
    }
    assert "leaf Variable that requires grad" in result["error"]["message"]


def test_backward_twice_fails_on_the_second_backward_line() -> None:
    source = """\
x = torch.ones(3, requires_grad=True)
y = (x * x).sum()
y.backward()
y.backward()
"""
    result = trace(source)
    assert lines(result) == [1, 2, 3]
    # the first backward ran its three nodes, each a step before line 3's own; the second ran
    # SumBackward0 (it saved no tensor) and failed at MulBackward0, whose saved tensors were freed
    backward = [s for s in result["steps"] if s["phase"] == "backward"]
    assert [s["line"] for s in backward] == [3, 3, 3, 4]
    assert backward[-1]["nodes"][backward[-1]["node"]]["name"] == "SumBackward0"
    assert result["error"]["line"] == 4
    assert result["error"]["message"].startswith("Trying to backward through the graph a second time")


def test_an_error_inside_a_function_reports_the_line_that_raised() -> None:
    source = """\
def f(t):
    u = t + 1
    return u.view(7)

f(torch.ones(3))
"""
    result = trace(source)
    assert result["error"]["line"] == 3
    assert result["error"]["type"] == "RuntimeError"
    assert lines(result) == [1, 2]  # the failing line and the call that led to it never completed


def test_an_exception_caught_by_the_snippet_is_just_a_step() -> None:
    source = """\
try:
    torch.ones(2).view(3)
except RuntimeError as e:
    msg = str(e)
done = 1
"""
    result = trace(source)
    assert result["ok"] and lines(result)[-1] == 5
    assert 2 in lines(result)


def test_import_lines_work() -> None:
    result = trace("import torch\nimport torch.nn as nn\nimport math\nx = torch.ones(1) * math.pi\n")
    assert result["ok"], result["error"]


def test_too_much_output_ends_the_run_with_an_output_error() -> None:
    result = trace("for i in range(1000):\n    print('x' * 100)\n", max_stdout=2048)
    assert result["ok"] is False
    assert result["error"]["kind"] == "output" and result["error"]["line"] == 2
    assert all(len(s["stdout"]) <= 2048 for s in result["steps"])


def test_a_failure_of_the_tracer_itself_is_internal_not_the_snippets(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: object, **_kwargs: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(snapshot.SnapshotTaker, "take", broken)
    result = trace("x = 1\ntry:\n    y = 2\nexcept Exception:\n    pass\nz = 3\n")
    assert result["ok"] is False
    assert result["error"]["kind"] == "internal"
    assert "KeyError" in result["error"]["message"]


def test_past_the_tensor_cap_every_name_still_points_at_a_described_tensor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "MAX_TENSORS", 2000)  # the real cap, 20,000, takes long to reach
    result = trace("xs = [[torch.ones(1) for _ in range(200)] for _ in range(12)]\ny = 1\n")
    for step in result["steps"]:
        assert len(step["tensors"]) == snapshot.MAX_TENSORS
        assert len(step["variables"]) == snapshot.MAX_TENSORS  # trace() also checked every reference
        assert step["capped"] == {"tensors": snapshot.MAX_TENSORS}  # said at every step it holds
