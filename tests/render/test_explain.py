"""What is drawn, explained (issue 14 §7): one unit ladder for every byte count, and a fresh
nn.Linear weight's v1 said where its version shows (torch is the oracle of the counter)."""

from __future__ import annotations

import re

import pytest
import torch

from app.units import byte_unit, fmt_bytes, nbytes
from tests.render.conftest import explore

SIZES = [0, 1, 1023, 1024, 1536, 10 * 1024, 123456, 1024 * 1024 - 1, 1024 * 1024, 3 * 1024 * 1024,
         3072 * 1024 + 1, 1024 ** 3 - 1, 5 * 1024 ** 3, 7 * 1024 ** 4]


@pytest.mark.parametrize("n", SIZES)
def test_every_byte_count_uses_one_ladder(n: int) -> None:
    value, unit = byte_unit(n)
    strip, sentence = nbytes(n), fmt_bytes(n)
    if unit == "B":
        assert strip == f"{n} B"
    else:
        # never "3072.0 KiB" beside "3.0 MiB": as written, below 1024 of its unit (GiB is the top)
        shown = float(strip.split(" ")[0])
        assert strip.endswith(f" {unit}") and (shown < 1024 or unit == "GiB")
        assert shown == pytest.approx(n / 1024 ** ("KiB", "MiB", "GiB").index(unit) / 1024, abs=0.05)
    if n >= 10 * 1024:  # the diagnostics' sentences write the same number in the same unit
        assert sentence.replace(",", "") == strip
    else:
        assert sentence == f"{n:,} bytes"


def _version_rows(code: str) -> dict[str, list[str]]:
    view = explore(code)
    facts, out = view.facts, {}
    for runs in facts.details.values():
        for _first, _last, index in runs:
            if index is None:
                continue
            rows = dict(facts.pairs[i] for i in facts.entries[index])
            out.setdefault(rows["title"], []).append(rows["_version"])
    return out


def test_a_fresh_linear_weight_says_why_it_is_at_v1() -> None:
    code = ("layer = nn.Linear(3, 2)\n"
            "x = torch.ones(3)\n"
            "with torch.no_grad():\n"
            "    x.add_(1)\n"
            "    layer.weight.mul_(2)\n")
    rows = _version_rows(code)
    fresh = torch.nn.Linear(3, 2)
    for name, tensor in (("layer.weight", fresh.weight), ("layer.bias", fresh.bias)):
        first = rows[name][0]
        assert first.startswith(f"{tensor._version} · initialised in place when line 1 made it")
    # once the snippet itself writes the weight, its counter is the snippet's doing: just the number
    assert rows["layer.weight"][-1] == str(fresh.weight._version + 1)
    # a tensor made at v0 and bumped later is no fresh initialisation either
    assert rows["x"] == ["0", "1"]
    assert not any(re.search("initialised", text) for text in rows["x"])


def test_the_step_label_says_after_which_line_ran_or_that_its_backward_pass_is_running() -> None:
    from app.render.explorer import client_payload, step_label
    from tests.render.conftest import trace

    code = "x = torch.ones(3, requires_grad=True)\ny = (x * 2).sum()\ny.backward()\n"
    view = explore(code)
    phases = [step.phase for step in trace(code).steps]
    labels = [step_label(view, s) for s in range(view.step_count)]
    assert labels[0] == f"Step 1 of {view.step_count} · after line 1 ran"
    assert labels[-1] == f"Step {view.step_count} of {view.step_count} · after line 3 ran"
    inside = [s for s, phase in enumerate(phases) if phase == "backward"]
    # one step per autograd node torch ran: SumBackward0, MulBackward0, AccumulateGrad
    assert len(inside) == 3 and client_payload(view)["backward"] == inside
    for s in inside:
        assert labels[s] == f"Step {s + 1} of {view.step_count} · line 3, inside its backward pass"
