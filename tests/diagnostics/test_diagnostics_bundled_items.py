"""A loop that keeps each iteration's loss inside a tuple, list, dict or namedtuple it adds to a
container (``history.append((loss, i))``) keeps the graphs in that container, as ``kept.append(loss)``
does: one ``graph-kept-by-container`` finding whose patch cuts the loss inside the item
(``(loss.item(), i)``). Each item was read as a cause of its own (``kept[3]`` for ``kept[3][0]``): 29
false findings on 30 iterations and no patch. Plain torch is the oracle that the graphs are kept (the
corpus's ``Grows``) and that the patched loop keeps none."""

from __future__ import annotations

import pytest
from diagnostics_support import run

from app.bench.snippets import KEPT_IN, kept_graphs
from app.diagnosis import apply
from app.diagnostics.index import part_of
from tests.diagnostics.corpus.cases import Grows, leak, quiet
from tests.diagnostics.corpus.oracle import check

# (before the loop, in the loop, the patched line): shapes beyond app.bench's KEPT_IN
MORE = {
    "list of lists": ("kept = []", "kept.append([i, out])", "kept.append([i, out.item()])"),
    "dict of tuples": ("kept = {}", "kept[i] = (out, i)", "kept[i] = (out.item(), i)"),
    "namedtuple": ("from collections import namedtuple\nRec = namedtuple('Rec', 'step loss')\nkept = []",
                   "kept.append(Rec(i, out))", "kept.append(Rec(i, out.item()))"),
    "namedtuple by keyword": ("from collections import namedtuple\nRec = namedtuple('Rec', 'loss step')\n"
                              "kept = []", "kept.append(Rec(loss=out, step=i))",
                              "kept.append(Rec(loss=out.item(), step=i))"),
}
FIXED = {
    "list of tuples": "kept.append((out.item(), i))",
    "set of tuples": "kept.add((out.item(), i))",
    "frozenset of tuples": "kept = kept | {(out.item(), i)}",
    "list of dicts": "kept.append({'loss': out.item(), 'step': i})",
}


def snippet(keep: str, op: str, n: int, backward: bool) -> str:
    if keep in KEPT_IN:
        return kept_graphs(op, n, keep, backward=backward)
    before, keeping, _fixed = MORE[keep]
    code = kept_graphs(op, n, "list", backward=backward)
    return code.replace("kept = []", before).replace("kept.append(out)", keeping)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("op", ["relu", "tanh"])
@pytest.mark.parametrize("keep", [*FIXED, *MORE])
def test_a_container_of_items_that_hold_the_loss_keeps_the_graphs(keep: str, op: str, backward: bool) -> None:
    code = snippet(keep, op, 12, backward)
    header = "for i in range(12):"
    assert check(leak("kept", code, header)) is None  # plain torch: the live graph nodes grow
    r = run(code)
    assert r.rules == ["graph-kept-by-container"], r.rules
    d = r.only("graph-kept-by-container")
    fixed = FIXED.get(keep) or MORE[keep][2]
    assert [p.text.strip() for p in d.patch] == [fixed]
    assert "stores `out` in `kept`" in d.message and "`kept` holds 12 graphs" in d.message, d.message
    patched = apply(code, d.patch)
    assert check(quiet("fixed", "twin", patched, Grows(header, False))) is None  # plain torch: no growth
    assert run(patched).rules == []


def test_thirty_iterations_of_a_list_of_tuples_give_one_finding() -> None:
    """The issue's own loop (tanh, 30 iterations)."""
    r = run(kept_graphs("tanh", 30, "list of tuples"))
    assert r.rules == ["graph-kept-by-container"], r.rules
    assert "After 30 iterations `kept` holds 30 graphs" in r.only("graph-kept-by-container").message


def test_a_dict_of_lists_stays_filed_under_the_list_that_grows() -> None:
    """``hist['loss'].append(loss)``: the list ``hist['loss']`` gains the items, not ``hist``."""
    r = run("""
w = torch.randn(8, requires_grad=True)
hist = {'loss': [], 'step': []}
for i in range(5):
    loss = (w * i).sigmoid().sum()
    hist['loss'].append(loss)
    hist['step'].append(i)
""")
    assert r.rules == ["graph-kept-by-container"], r.rules
    d = r.only("graph-kept-by-container")
    assert "`hist['loss']`" in d.message
    assert [p.text.strip() for p in d.patch] == ["hist['loss'].append(loss.item())"]


def test_what_a_key_is_a_part_of() -> None:
    assert part_of("kept[3][0]") == "kept[3]"
    assert part_of("kept[3]") == "kept"
    assert part_of("kept[3].loss") == "kept[3]"  # a namedtuple's field
    assert part_of("kept{2}[0]") == "kept{2}"
    assert part_of("model.h") is None  # an object's attribute: the object does not gain items
    assert part_of("f:self.h") is None
    assert part_of("kept") is None


@pytest.mark.parametrize(("keep", "fixed"), [
    ("history.append((loss, pred))", "history.append((loss.item(), pred.detach()))"),  # both hold a graph
    ("history.append((loss, pred.detach()))", "history.append((loss.item(), pred.detach()))"),
    ("history.append({'loss': loss, 'acc': (pred > 0).float().mean()})",
     "history.append({'loss': loss.item(), 'acc': (pred > 0).float().mean()})"),
    ("history.append((i, [loss, pred]))", "history.append((i, [loss.item(), pred.detach()]))"),
    ("history.append((i, [loss]))", "history.append((i, [loss.item()]))"),
])
def test_the_patch_cuts_each_part_of_an_item_that_holds_a_graph_and_only_those(keep: str, fixed: str) -> None:
    code = f"""
w = torch.randn(8, requires_grad=True)
history = []
for i in range(5):
    pred = (w * i).tanh()
    loss = pred.sum()
    {keep}
"""
    header = "for i in range(5):"
    assert check(leak("kept", code, header)) is None
    r = run(code)
    assert r.rules == ["graph-kept-by-container"], r.rules
    d = r.only("graph-kept-by-container")
    assert [p.text.strip() for p in d.patch] == [fixed]
    patched = apply(r.code, d.patch)
    assert check(quiet("fixed", "twin", patched, Grows(header, False))) is None
    assert run(patched).rules == []
