"""A loss kept together with other values in each item (``cases.py`` adds them to ``CASES``):
``history.append((loss, i))`` keeps the graph exactly as ``history.append(loss)`` does. The tuple (list,
dict, namedtuple) each iteration adds is one item of the container that grows, not a name of its own
built from its previous value; the cut is the loss inside the item (``(loss.item(), i)``). Each
labelled as in ``cases.py`` and checked in plain torch by ``oracle.py``; each leak has a fixed twin,
and the look-alikes keep numbers or detached tensors in the same shapes.
"""

from __future__ import annotations

from tests.diagnostics.corpus.cases import CONTAINER, Case, Finding, Grows, leak, quiet

TRAINED = """
    model = nn.Sequential(nn.Linear(6, 8), nn.ACT(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    BEFORE
    for step in range(4):
        x = torch.randn(16, 6)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        KEEP
"""

FORWARD = """
    w = torch.randn(32, requires_grad=True)
    BEFORE
    for step in range(4):
        loss = (w * step).ACT().mean()
        KEEP
"""

LOOP = "for step in range(4):"

# (name, before the loop, what the loop keeps, its fix, the line the fix gives)
SHAPES = [
    ("list-of-tuples", "history = []", "history.append((loss, step))", "history.append((loss.item(), step))"),
    ("list-of-lists", "history = []", "history.append([step, loss])", "history.append([step, loss.item()])"),
    ("dict-of-tuples", "history = {}", "history[step] = (loss, step)", "history[step] = (loss.item(), step)"),
    ("set-of-tuples", "history = set()", "history.add((loss, step))", "history.add((loss.item(), step))"),
    ("list-of-dicts", "history = []", "history.append({'loss': loss, 'step': step})",
     "history.append({'loss': loss.item(), 'step': step})"),
    ("namedtuples", "from collections import namedtuple\nRecord = namedtuple('Record', 'step loss')\n"
     "history = []", "history.append(Record(step, loss))", "history.append(Record(step, loss.item()))"),
    ("namedtuples-by-keyword", "from collections import namedtuple\n"
     "Record = namedtuple('Record', 'step loss')\nhistory = []",
     "history.append(Record(step=step, loss=loss))", "history.append(Record(step=step, loss=loss.item()))"),
]


def _with(code: str, act: str, before: str, keep: str) -> str:
    before = before.replace("\n", "\n    ")  # (the snippet is indented, dedented later)
    return code.replace("ACT", act).replace("BEFORE", before).replace("KEEP", keep)


def _cases() -> list[Case]:
    out: list[Case] = []
    for shape, before, keep, fixed in SHAPES:
        for code, act, how in ((TRAINED, "ReLU", "trained"), (FORWARD, "tanh", "forward")):
            name = f"{shape}-{how}"
            out.append(leak(name, _with(code, act, before, keep), LOOP,
                            Finding(CONTAINER, "warning", keep, fixed), twin=f"{name}-item",
                            story=f"history.append((loss, i)): the loss kept in a {shape} ({how})"))
            out.append(quiet(f"{name}-item", "twin", _with(code, act, before, fixed), Grows(LOOP, False)))
    return out


PAIR = """
    w = torch.randn(32, requires_grad=True)
    history = []
    for step in range(4):
        pred = (w * step).sigmoid()
        loss = pred.pow(2).mean()
        KEEP
"""


def _pair(keep: str) -> str:
    return PAIR.replace("KEEP", keep)


BUNDLED: list[Case] = [
    *_cases(),
    leak("pair-of-graphs", _pair("history.append((loss, pred))"), LOOP,
         Finding(CONTAINER, "warning", "history.append((loss, pred))",
                 "history.append((loss.item(), pred.detach()))"),
         twin="pair-of-graphs-cut", story="the loss and the prediction it came from, both with a graph"),
    quiet("pair-of-graphs-cut", "twin", _pair("history.append((loss.item(), pred.detach()))"),
          Grows(LOOP, False)),
    leak("pair-one-detached", _pair("history.append((loss, pred.detach()))"), LOOP,
         Finding(CONTAINER, "warning", "history.append((loss, pred.detach()))",
                 "history.append((loss.item(), pred.detach()))"),
         twin="pair-of-graphs-cut", story="the prediction detached, the loss not: the loss is the cut"),
    leak("loss-in-a-list-in-a-tuple", _pair("history.append((step, [loss]))"), LOOP,
         Finding(CONTAINER, "warning", "history.append((step, [loss]))",
                 "history.append((step, [loss.item()]))"),
         twin="loss-in-a-list-in-a-tuple-item", story="the loss two levels down in each item"),
    quiet("loss-in-a-list-in-a-tuple-item", "twin", _pair("history.append((step, [loss.item()]))"),
          Grows(LOOP, False)),
    quiet("list-of-tuples-detached", "lookalike",
          _with(FORWARD, "tanh", "history = []", "history.append((loss.detach(), step))"), Grows(LOOP, False),
          story="the same tuples holding detached losses: nothing kept"),
    quiet("tuple-window-of-two", "lookalike",
          _with(FORWARD, "sigmoid", "history = []", "history = (history + [(loss, step)])[-2:]"),
          Grows(LOOP, False), story="a window of the last two (loss, step) pairs: bounded"),
]
