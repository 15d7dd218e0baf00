"""A fact torch refuses to give is shown as refused, with torch's reason, never as a value it is not:
an output of ``unbind`` whose base was then written in place prints ``grad_fn=<Invalid>`` and raises on
``.is_leaf`` and ``.grad_fn`` (torch is the oracle)."""

from __future__ import annotations

import pytest
import torch

from app.render import details
from tests.render.conftest import explore

CODE = """x = torch.arange(6.).reshape(2, 3).requires_grad_()
y = x.{op}
u = y.{split}[1]
y.mul_(2)
"""

VARIANTS = [("clone()", "unbind(0)"), ("exp()", "split(1)"), ("sin()", "chunk(2)")]


def _last_rows(code: str, title: str) -> dict[str, str]:
    facts = explore(code).facts
    last: dict[str, str] | None = None
    for runs in facts.details.values():
        for _first, _last, index in runs:
            if index is not None:
                rows = dict(facts.pairs[i] for i in facts.entries[index])
                if rows["title"] == title:
                    last = rows
    assert last is not None, f"no rows titled {title}"
    return last


@pytest.mark.parametrize(("op", "split"), VARIANTS)
def test_an_invalid_view_shows_grad_fn_as_torch_prints_it_and_says_why(op: str, split: str) -> None:
    code = CODE.format(op=op, split=split)
    namespace: dict = {"torch": torch}
    exec(code, namespace)  # noqa: S102 - the oracle: plain torch on the same snippet
    u = namespace["u"]
    assert "grad_fn=<Invalid>" in repr(u)
    with pytest.raises(RuntimeError) as refused:
        _ = u.is_leaf

    rows = _last_rows(code, "u")
    assert rows["grad_fn"] == "<Invalid>"
    assert rows["is_leaf"] == details.REFUSED
    reason = rows["torch refuses"]
    assert reason.startswith("grad_fn, is_leaf: ")
    # torch's own words, shortened at most: the first clause of its message is there
    assert str(refused.value).split(" and ")[0][:40] in reason


def test_a_tensor_torch_gives_every_fact_of_has_no_refusal_row() -> None:
    code = CODE.format(op="clone()", split="unbind(0)").replace("y.mul_(2)\n", "")
    rows = _last_rows(code, "u")
    assert "torch refuses" not in rows
    assert rows["is_leaf"] == "False" and rows["grad_fn"].startswith("Unbind")
