"""Gradients that never arrive, and the fix each finding offers, checked in plain torch.

* ``w = torch.randn(3, requires_grad=True) * 0.01`` (or ``.to(...)``): the leaf is the factory's
  unnamed result; ``w.grad`` stays None. The fix used to be ``w.retain_grad()`` — a gradient to look
  at, but ``w`` still no parameter an optimizer accepts; now ``w`` is made the leaf.
* ``torch.tensor(np.mean(out.detach().numpy() ** 2), requires_grad=True)``: of the cuts nested in the
  line, the one where the graph ends (``.numpy()``) is explained. The outer rewrap was, with the fix
  ``np.mean(...).clone()`` — a numpy number has no ``clone``.
"""

from __future__ import annotations

import pytest
import torch
from diagnostics_support import code_of, namespace, run

from app.diagnosis import apply

LOST_LEAVES = {
    "scaled": "w = torch.randn(3, requires_grad=True) * 0.01",
    "to-dtype": "w = torch.randn(3, requires_grad=True).to(torch.float64)",
    "with-dtype-added": "w = torch.zeros(3, dtype=torch.float64, requires_grad=True) + 0.5",
}


@pytest.mark.parametrize("name", LOST_LEAVES)
def test_a_parameter_made_from_an_inline_leaf_is_made_the_leaf(name: str) -> None:
    code = code_of(f"""
        {LOST_LEAVES[name]}
        x = torch.randn(3, dtype=w.dtype)
        loss = (w * x).sum() ** 2
        loss.backward()
        print(w.grad)
    """)
    ns = namespace(code)
    assert ns["w"].grad is None and not ns["w"].is_leaf  # torch: the gradient went to the unnamed leaf
    with pytest.raises(ValueError, match="non-leaf"):
        torch.optim.SGD([ns["w"]], lr=0.1)
    r = run(code)
    d = r.only("nonleaf-grad-read")
    assert "Make `w` itself the leaf" in d.fix and ".requires_grad_()" in d.fix and d.patch
    fixed = namespace(apply(code, d.patch))  # torch: w is the leaf, with its gradient
    assert fixed["w"].is_leaf and fixed["w"].grad is not None
    assert fixed["w"].dtype == ns["w"].dtype
    torch.optim.SGD([fixed["w"]], lr=0.1)


def test_a_computed_tensor_read_for_its_gradient_still_gets_retain_grad() -> None:
    """``h = x * 2`` then ``h.grad``: no leaf was lost on that line, and retain_grad is the answer."""
    r = run("""
        x = torch.randn(3, requires_grad=True)
        h = x * 2
        h.sum().backward()
        print(h.grad)
    """)
    d = r.only("nonleaf-grad-read")
    assert "`h.retain_grad()`" in d.fix


def test_nested_cuts_explain_the_inner_one_and_offer_no_numpy_clone() -> None:
    code = code_of("""
        import numpy as np
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        w0 = model.weight.detach().clone()
        out = model(torch.randn(3, 4))
        loss = torch.tensor(np.mean(out.detach().numpy() ** 2), requires_grad=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
    """)
    ns = namespace(code)
    assert torch.equal(ns["w0"], ns["model"].weight.detach())  # torch: never trained
    r = run(code)
    d = r.only("grad-stays-none")
    assert "numpy" in d.message and ".clone()" not in d.fix and "`out`" in d.fix
    for patch in d.patch:  # whatever it writes must run
        namespace(apply(code, [patch]))


INDEX_LOSSES = {
    "argmax-float": "pred = model(x).argmax(1).float()\nloss = F.mse_loss(pred, y)",
    "comparison": "pred = (model(x)[:, 0] > 0).float()\nloss = F.mse_loss(pred, y)",
    "torch-argmax": "pred = torch.argmax(model(x), dim=1).float()\nloss = (pred - y).abs().mean()",
}


@pytest.mark.parametrize("name", INDEX_LOSSES)
def test_a_loss_of_indices_is_told_to_use_the_scores(name: str) -> None:
    """argmax / a comparison gives values autograd records nothing for: torch raises at backward()."""
    lines = INDEX_LOSSES[name].split("\n")
    code = ("model = nn.Linear(4, 3)\nx = torch.randn(5, 4)\ny = torch.randint(0, 3, (5,)).float()\n"
            + "\n".join(lines) + "\nloss.backward()\n")
    with pytest.raises(RuntimeError, match="does not require grad"):
        namespace(code)
    r = run(code)
    d = r.only("backward-without-graph")
    assert d.lines == [4] and "no gradient" in d.message and "F.cross_entropy" in d.fix
