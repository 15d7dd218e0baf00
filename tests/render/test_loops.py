"""What the page says about the snippet's loops (app/render/loops.py): the memory an iteration adds,
and the step where a loop ended (not "after line 3 ran", which reads as if it ran once more)."""

from __future__ import annotations

from app.render.explorer import step_label
from app.render.loops import read_loops
from tests.render.conftest import explore, run_namespace, trace_v1

LEAK = """\
w = torch.randn(16, requires_grad=True)
losses = []
for i in range(6):
    loss = (w * i).sin().sum()
    losses.append(loss)
done = True
"""
STEADY = LEAK.replace("losses.append(loss)", "losses.append(loss.item())")


def _header_steps(code: str, line: int) -> list[int]:
    return [i for i, step in enumerate(trace_v1(code).steps) if step.line == line]


def test_a_loop_that_keeps_its_graphs_grows_and_one_that_keeps_numbers_does_not() -> None:
    (leak,) = explore(LEAK).loops
    (steady,) = explore(STEADY).loops
    assert leak.line == steady.line == 3
    assert leak.iterations == steady.iterations == 6  # seven header steps: six iterations between them
    # what one iteration keeps, asked of torch: the loss (a 4-byte scalar) and what its graph saved
    namespace = run_namespace(LEAK)
    kept = namespace["losses"][-1]
    assert kept.untyped_storage().nbytes() <= leak.per_iteration
    assert leak.per_iteration > 0 and "+" in leak.text and "per iteration" in leak.text
    assert steady.per_iteration == 0 and "no growth" in steady.text


def test_the_step_where_a_loop_ended_says_so() -> None:
    view = explore(LEAK)
    headers = _header_steps(LEAK, 3)
    assert len(headers) == 7
    *taking, ended = headers
    assert step_label(view, ended) == f"Step {ended + 1} of {view.step_count} · the loop at line 3 ended"
    for step in taking:
        assert step_label(view, step).endswith("after line 3 ran")
    assert view.loop_ends == frozenset({ended})


def test_nested_loops_end_each_at_its_own_last_header_step() -> None:
    code = "t = torch.zeros(2)\nfor i in range(2):\n    for j in range(3):\n        t += 1\nend = 1\n"
    view = explore(code)
    outer, inner = _header_steps(code, 2), _header_steps(code, 3)
    assert view.loop_ends == frozenset({outer[-1], *(s for s in inner if s + 1 < view.step_count
                                                      and view.lines[s + 1] != 4)})
    # the inner loop ended once per outer iteration
    assert len([s for s in inner if s in view.loop_ends]) == 2


def test_a_loop_cut_by_a_limit_did_not_end() -> None:
    lines = [1, 2, 3, 2, 3, 2, 3]
    loops = read_loops("x = 0\nwhile True:\n    x += 1\n", lines, [0] * len(lines), finished=False)
    assert loops.ended == frozenset()
    lines = [1, 2, 3, 2, 3, 2, 3, 2]
    finished = read_loops("x = 0\nwhile x < 3:\n    x += 1\n", lines, [0] * len(lines), finished=True)
    assert finished.ended == frozenset({7})
