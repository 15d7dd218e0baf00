"""Running totals and hand-written updates in loops: the fix each finding writes, carried out, runs in
plain torch and ends what torch shows (a graph that grows, a ``.grad`` that is None).

* a total built from a call's result (``val_loss += F.mse_loss(model(x), y)``): the number is added
  (``.item()``), where the fix used to cut ``val_loss`` under ``if val_loss is not None:`` — and a
  total that starts at ``0`` is not None, so that cut called ``detach`` on an int;
* a total with nothing to ``.item()`` (``ema = 0.9 * ema + 0.1 * model(x).mean()``): cut under a
  guard that holds for ``0`` (``isinstance(ema, torch.Tensor)``); a method of a value with a graph
  (``0.1 * new.exp()``) is cut whole (``new.exp().item()``: ``new.item().exp()`` is no float method,
  and leaving it out kept the chain);
* ``w = w - lr * w.grad``: the next pass reads ``.grad`` of a non-leaf, None, and the run fails there
  with a TypeError no rule explained; the fix is the update in place under ``no_grad``.
"""

from __future__ import annotations

import pytest
import torch
from diagnostics_support import code_of, namespace, run

from app.diagnosis import apply


def _nodes(t: torch.Tensor) -> int:
    """Autograd nodes ``t``'s graph holds (torch's own count)."""
    seen: set[int] = set()
    stack = [t.grad_fn] if t.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            stack.extend(fn for fn, _ in node.next_functions if fn is not None)
    return len(seen)


TOTALS = {
    # name: (snippet, the total, the patched line as the fix must write it)
    "augassign-call-from-zero": ("""
        model = nn.Linear(4, 1)
        val_loss = 0
        for i in range(4):
            x = torch.randn(3, 4)
            y = torch.randn(3, 1)
            val_loss += F.mse_loss(model(x), y)
        print(val_loss / 4)
    """, "val_loss", "    val_loss += F.mse_loss(model(x), y).item()"),
    "assign-plus-call-from-float": ("""
        model = nn.Linear(4, 1)
        total = 0.0
        for i in range(4):
            total = total + model(torch.randn(3, 4)).pow(2).mean()
        print(total)
    """, "total", "    total = total + model(torch.randn(3, 4)).pow(2).mean().item()"),
    "sum-of-a-binop": ("""
        w = torch.randn(5, requires_grad=True)
        acc = 0
        for i in range(3):
            acc += (w * torch.randn(5)).sum() * 2
        print(acc)
    """, "acc", "    acc += (w * torch.randn(5)).sum().detach() * 2"),
}


@pytest.mark.parametrize("name", TOTALS)
def test_a_total_of_computed_values_adds_numbers(name: str) -> None:
    source, total, patched_line = TOTALS[name]
    code = code_of(source)
    assert _nodes(namespace(code)[total]) > 4  # torch: the total links every iteration's graph
    r = run(code)
    d = r.only("graph-chained-across-iterations")
    assert [p.text for p in d.patch] == [patched_line]
    fixed = namespace(apply(code, d.patch))  # torch: it runs, and keeps no graph
    assert not isinstance(fixed[total], torch.Tensor) or fixed[total].grad_fn is None
    assert _bounded(apply(code, d.patch), total)


def _bounded(code: str, name: str) -> bool:
    """torch: what ``name`` holds at the end keeps as many graph nodes after 8 iterations as after 4."""
    def held(n: int) -> int:
        value = namespace(code.replace("range(4)", f"range({n})"))[name]
        return _nodes(value) if isinstance(value, torch.Tensor) else 0
    return held(4) == held(8)


CARRIED = {
    # name: (snippet, the guard or the line its fix writes)
    "from-zero": ("""
        model = nn.Linear(4, 1)
        ema = 0
        for i in range(4):
            ema = 0.9 * ema + 0.1 * model(torch.randn(3, 4)).pow(2).mean()
        print(ema)
    """, "if isinstance(ema, torch.Tensor):"),
    "from-none-through-a-method": ("""
        model = nn.Linear(4, 1)
        ema = None
        for i in range(4):
            new = model(torch.randn(3, 4)).pow(2).mean()
            ema = new if ema is None else 0.9 * ema + 0.1 * new.exp()
        print(ema)
    """, "ema = new.item() if ema is None else 0.9 * ema + 0.1 * new.exp().item()"),
    "a-method-of-the-loss": ("""
        model = nn.Linear(4, 1)
        ema = 0
        for i in range(4):
            loss = model(torch.randn(3, 4)).pow(2).mean()
            ema = 0.9 * ema + 0.1 * loss.sqrt()
        print(ema)
    """, "ema = 0.9 * ema + 0.1 * loss.sqrt().item()"),
}


@pytest.mark.parametrize("name", CARRIED)
def test_a_carried_value_is_cut_so_that_torch_holds_no_more_graph(name: str) -> None:
    """The fix must end the growth torch shows, and run where the value starts as 0 or None."""
    source, written = CARRIED[name]
    code = code_of(source)
    assert not _bounded(code, "ema")  # torch: it grows with the loop
    r = run(code)
    d = r.only("graph-chained-across-iterations")
    fixed = apply(code, d.patch)
    assert written in fixed
    assert _bounded(fixed, "ema")  # torch: the fix runs and holds a bounded graph


UPDATES = {
    "minus": "w = w - 0.1 * w.grad",
    "plus": "w = w + (-0.1) * w.grad",
}


@pytest.mark.parametrize("name", UPDATES)
def test_a_parameter_rebound_to_its_update_is_told_to_update_in_place(name: str) -> None:
    code = code_of(f"""
        w = torch.randn(3, requires_grad=True)
        x = torch.randn(3)
        for i in range(3):
            loss = (w * x).sum() ** 2
            loss.backward()
            {UPDATES[name]}
        print(w)
    """)
    with pytest.raises(TypeError):  # torch: w.grad is None at the second pass
        namespace(code)
    r = run(code)
    assert r.result.error is not None and r.result.error.type == "TypeError"
    d = r.only("nonleaf-grad-read")
    assert d.line == 6 and "no_grad" in d.fix and "retain_grad" not in d.fix
    fixed = namespace(apply(code, d.patch))  # torch: runs, w stays the leaf and moves
    assert fixed["w"].is_leaf and fixed["w"].requires_grad
    assert not torch.equal(fixed["w"].detach(), namespace(code.split("for i")[0])["w"].detach())


def test_the_optimizers_way_and_a_deliberate_rebinding_get_no_finding() -> None:
    r = run("""
        w = torch.randn(3, requires_grad=True)
        x = torch.randn(3)
        for i in range(3):
            loss = (w * x).sum() ** 2
            loss.backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
            w.grad = None
        v = torch.randn(3, requires_grad=True)
        for i in range(3):
            (v * x).sum().backward()
            v = (v - 0.1 * v.grad).detach().requires_grad_()
    """)
    assert [d.rule for d in r.diagnostics if d.severity != "info"] == []


def test_outputs_gathered_by_cat_keep_values_not_a_sum_to_backpropagate() -> None:
    """``all_out = torch.cat([all_out, out])``: the fix detaches what joins; no ``all_out.backward()``
    (not a number: torch would refuse it without a gradient argument)."""
    code = code_of("""
        model = nn.Linear(4, 2)
        all_out = torch.empty(0, 2)
        for i in range(4):
            out = model(torch.randn(3, 4))
            all_out = torch.cat([all_out, out])
        print(all_out.shape)
    """)
    assert not _bounded(code, "all_out")
    r = run(code)
    d = r.only("graph-chained-across-iterations")
    assert "backward()" not in d.fix and [p.text for p in d.patch] == [
        "    all_out = torch.cat([all_out, out.detach()])"]
    assert _bounded(apply(code, d.patch), "all_out")


def test_an_lstm_state_carried_from_none_is_cut_as_a_tuple_under_its_guard() -> None:
    code = code_of("""
        rnn = nn.LSTM(4, 8)
        h = None
        for i in range(4):
            out, h = rnn(torch.randn(1, 1, 4), h)
        c = h[1]
    """)
    assert not _bounded(code, "c")  # torch: the cell state links every step's graph
    r = run(code)
    d = r.only("graph-chained-across-iterations")
    fixed = apply(code, d.patch)
    assert "if h is not None:" in fixed and "h = tuple(s.detach() for s in h)" in fixed
    assert _bounded(fixed, "c")  # torch: runs from None, and holds one step's graph
