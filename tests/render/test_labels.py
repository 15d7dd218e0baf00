"""``StepInput.label`` keeps each tensor's label from step to step (``steps.Labels``) and forgets it
only where a step may have changed it: every label any builder asks for is ``names.label`` at that
step, on every golden trace."""

from __future__ import annotations

import pytest

from app.render import build_explorer, steps
from app.render.names import label
from app.schema import DeltaTrace
from app.trace.delta import compress
from tests.golden import load

GOLDEN = list(load())


def labels_checked(monkeypatch) -> list[str]:  # noqa: ANN001
    """Every label a builder asks for, each checked against ``names.label`` at its step."""
    asked: list[str] = []
    kept = steps.StepInput.label

    def both(self, tid):  # noqa: ANN001, ANN202
        found = kept(self, tid)
        assert found == label(self.holding, tid), (self.index, tid)
        asked.append(found)
        return found

    monkeypatch.setattr(steps.StepInput, "label", both)
    return asked


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.name for g in GOLDEN])
def test_every_label_kept_is_the_label_now(golden, monkeypatch) -> None:  # noqa: ANN001
    asked = labels_checked(monkeypatch)
    build_explorer(DeltaTrace.model_validate(compress(golden.result)), golden.source)
    assert asked or not any(s["tensors"] for s in golden.result["steps"])


SCENARIOS = {
    # g's grad_fn graph saves the view g: its base, which no variable reaches, reads by that holder
    "base of a reheld view": ("w = torch.randn(3, requires_grad=True)\n"
                              "x = torch.randn(3, requires_grad=True)\n"
                              "g, = torch.autograd.grad((w * x).sum(), x, create_graph=True)\n"
                              "((g ** 2).sum()).backward()", "._base of"),
    # w.grad reads by w's name: renaming w renames it, though its own fact did not change
    "a name read on along .grad": ("w = torch.ones(2, requires_grad=True)\nw.sum().backward()\nv = w\n"
                                   "del w", "v.grad"),
    # g reads by the first tensor whose .grad it is; when that pointer goes, by the next
    "a pointer dropped": ("a = torch.ones(2, requires_grad=True)\n"
                          "c = torch.ones(2, requires_grad=True)\n"
                          "g = torch.zeros(2)\na.grad = g\nc.grad = g\ndel g\na.grad = None", "c.grad"),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_label_that_moves_without_its_own_fact_is_made_anew(name, monkeypatch) -> None:  # noqa: ANN001
    from tests.render.conftest import trace

    code, expected = SCENARIOS[name]
    asked = labels_checked(monkeypatch)
    build_explorer(trace(code), code)
    assert any(expected in found for found in asked), asked
