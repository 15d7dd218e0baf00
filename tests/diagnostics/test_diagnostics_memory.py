"""Memory accounting per step, with torch as the oracle for every byte count."""

from __future__ import annotations

import pytest
from diagnostics_support import code_of, graph_storages, named_tensors, namespace, run, variable_storages

from app.diagnostics.memory import account

LOSSES = """
w = torch.randn(64, requires_grad=True)
losses = []
for i in range({n}):
    x = torch.randn(64)
    loss = (w * x).sigmoid().sum()
    losses.append(loss)
"""


def oracle(code: str) -> tuple[int, int, int]:
    """(through variables, held only by the graph, total) after the last line, measured by torch."""
    ns = namespace(code)
    roots = named_tensors(ns)
    through_variables = variable_storages(roots)
    graph = graph_storages(roots)
    graph_only = {ptr: n for ptr, n in graph.items() if ptr not in through_variables}
    total = sum({**graph, **through_variables}.values())
    return sum(through_variables.values()), sum(graph_only.values()), total


@pytest.mark.parametrize("n", [1, 2, 3])
def test_list_of_losses_matches_torch(n: int) -> None:
    code = code_of(LOSSES.format(n=n))
    last = run(code).memory[-1]
    variables, graph, total = oracle(code)
    assert (last.variable_bytes, last.graph_bytes, last.total_bytes) == (variables, graph, total)
    assert last.total_bytes == last.variable_bytes + last.graph_bytes


def test_graph_only_bytes_grow_by_one_graph_per_iteration() -> None:
    finals = [run(LOSSES.format(n=n)).memory[-1].graph_bytes for n in (1, 2, 3, 4)]
    steps = {b - a for a, b in zip(finals, finals[1:], strict=False)}
    # Each kept graph saves x (64 floats) and the sigmoid output (64 floats); the newest x is named.
    assert steps == {2 * 64 * 4}


def test_item_keeps_graph_memory_bounded() -> None:
    item = LOSSES.replace("losses.append(loss)", "losses.append(loss.item())")
    code = code_of(item.format(n=4))
    result = run(code)
    _, graph, _ = oracle(code)
    assert result.memory[-1].graph_bytes == graph == 64 * 4  # only the last loss's sigmoid output
    # The peak stays the same however many iterations run (while appending the tensor it grows).
    peaks = {max(m.graph_bytes for m in run(item.format(n=n)).memory) for n in (2, 6)}
    assert len(peaks) == 1
    grows = [max(m.graph_bytes for m in run(LOSSES.format(n=n)).memory) for n in (2, 6)]
    assert grows[1] > grows[0]


def test_views_and_detach_share_and_are_counted_once() -> None:
    result = run("""
        x = torch.arange(12.).reshape(3, 4)
        t = x.t()
        col = x[:, 1]
        d = x.detach()
        c = x.clone()
    """)
    last = result.memory[-1]
    ns = namespace(code_of(result.code))
    assert last.total_bytes == ns["x"].untyped_storage().nbytes() + ns["c"].untyped_storage().nbytes() == 96
    assert last.shared_bytes == ns["x"].untyped_storage().nbytes()
    step = result.result.steps[-1]
    assert last.shared_storages == [step.tensors[step.variables["x"]].storage]
    assert last.graph_bytes == 0


def test_a_leaf_only_the_graph_holds_is_graph_memory() -> None:
    # The leaf has no name: only y's graph (its AccumulateGrad) keeps it alive.
    code = "y = torch.ones(100, requires_grad=True).exp()\n"
    last = run(code).memory[-1]
    variables, graph, total = oracle(code)
    assert (last.variable_bytes, last.graph_bytes) == (variables, graph) == (400, 400)


def test_backward_frees_saved_tensors_and_grad_counts_through_its_variable() -> None:
    result = run("""
        w = torch.randn(256, requires_grad=True)
        y = (w * 2).exp()
        loss = y.sum()
        loss.backward()
    """)
    forward = [i for i, step in enumerate(result.result.steps) if step.phase == "forward"]
    before, after = result.memory[forward[-2]], result.memory[forward[-1]]  # around loss.backward()
    variables, graph, _ = oracle(result.code)
    assert (after.variable_bytes, after.graph_bytes) == (variables, graph)
    assert after.variable_bytes - before.variable_bytes == 256 * 4  # w.grad appeared
    # exp's saved result is y itself (named); MulBackward0 saved the scalar 2 (a float64): freed.
    assert (before.graph_bytes, after.graph_bytes) == (8, 0)


def test_the_account_of_an_empty_step_is_zero() -> None:
    from app.schema import DeltaStep, DeltaTrace

    [empty] = account(DeltaTrace(ok=True, steps=[DeltaStep(line=1)]))
    assert (empty.total_bytes, empty.variable_bytes, empty.graph_bytes, empty.shared_bytes) == (0, 0, 0, 0)
