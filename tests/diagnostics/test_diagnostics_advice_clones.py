"""``unneeded-clone`` says "use the original itself" only where torch agrees the copy and its source
always hold the same numbers. Writes torch does not count on the version counter still make a copy
needed: BatchNorm's running statistics updated by a training forward, a numpy write through
``torch.from_numpy``, ``w.data.mul_`` (``.data`` has a counter of its own). The patch that removed
those clones would have made the snapshot follow the original.

Oracle: the snippet run in plain torch; the snapshot differs from its source at the end exactly when
the copy was needed."""

from __future__ import annotations

import pytest
import torch
from diagnostics_support import code_of, namespace, run

NEEDED = {
    # name: (snippet, snapshot, source expression)
    "batchnorm-running-mean": ("""
        bn = nn.BatchNorm1d(300)
        snap = bn.running_mean.clone()
        for i in range(2):
            out = bn(torch.randn(8, 300))
    """, "snap", "bn.running_mean"),
    "batchnorm2d-running-var-in-a-model": ("""
        model = nn.Sequential(nn.Conv2d(1, 300, 1), nn.BatchNorm2d(300))
        before = model[1].running_var.clone()
        model.train()
        y = model(torch.randn(2, 1, 2, 2))
    """, "before", "model[1].running_var"),
    "numpy-write": ("""
        import numpy as np
        a = np.zeros(400, dtype=np.float32)
        t = torch.from_numpy(a)
        before = t.clone()
        a[0] = 5
    """, "before", "t"),
    "data-write": ("""
        w = torch.randn(400, requires_grad=True)
        w0 = w.clone()
        w.data.mul_(0.5)
    """, "w0", "w"),
}


def _value(ns: dict, expression: str) -> torch.Tensor:
    value = ns
    for part in expression.replace("[", ".").replace("]", "").split("."):
        value = value[int(part)] if part.isdigit() else value[part] if isinstance(value, dict) \
            else getattr(value, part)
    return value.detach()  # type: ignore[union-attr]


@pytest.mark.parametrize("name", NEEDED)
def test_a_copy_of_what_torch_changes_without_a_version_bump_is_needed(name: str) -> None:
    source, snapshot, original = NEEDED[name]
    ns = namespace(code_of(source))
    assert not torch.equal(ns[snapshot], _value(ns, original))  # torch: the copy kept the old numbers
    r = run(source)
    assert "unneeded-clone" not in r.rules


def test_a_copy_nothing_changes_is_still_reported() -> None:
    source = """
        bn = nn.BatchNorm1d(300)
        bn.eval()
        snap = bn.running_var.clone()
        out = bn(torch.randn(8, 300))
    """
    ns = namespace(code_of(source))
    assert torch.equal(ns["snap"], ns["bn"].running_var)  # torch: eval mode leaves the stats alone
    r = run(source)
    d = r.only("unneeded-clone")
    assert [p.text for p in d.patch] == ["snap = bn.running_var"]
