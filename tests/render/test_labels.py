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


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.name for g in GOLDEN])
def test_every_label_kept_is_the_label_now(golden, monkeypatch) -> None:  # noqa: ANN001
    asked = []
    kept = steps.StepInput.label

    def both(self, tid):  # noqa: ANN001, ANN202
        found = kept(self, tid)
        assert found == label(self.holding, tid), (self.index, tid)
        asked.append(tid)
        return found

    monkeypatch.setattr(steps.StepInput, "label", both)
    build_explorer(DeltaTrace.model_validate(compress(golden.result)), golden.source)
    assert asked or not any(s["tensors"] for s in golden.result["steps"])


def test_the_base_of_a_view_the_graph_comes_to_hold_is_labelled_anew(monkeypatch) -> None:  # noqa: ANN001
    """A double backward: ``g`` is a view whose base no variable reaches; when the second graph saves
    ``g`` the base reads by that holder ("self._base of Mul"), though its own fact did not change."""
    from tests.render.conftest import trace

    code = ("w = torch.randn(3, requires_grad=True)\nx = torch.randn(3, requires_grad=True)\n"
            "g, = torch.autograd.grad((w * x).sum(), x, create_graph=True)\n((g ** 2).sum()).backward()")
    asked = []
    kept = steps.StepInput.label

    def both(self, tid):  # noqa: ANN001, ANN202
        found = kept(self, tid)
        assert found == label(self.holding, tid), (self.index, tid)
        asked.append(found)
        return found

    monkeypatch.setattr(steps.StepInput, "label", both)
    build_explorer(trace(code), code)
    assert any("._base of" in found for found in asked)
