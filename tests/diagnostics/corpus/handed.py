"""Values handed to a helper by name (``cases.py`` adds them to ``CASES``): ``meter.update(val=loss)``
keeps a graph exactly as ``meter.update(loss)`` does, and its cut is at the same call. Each labelled
as in ``cases.py`` and checked in plain torch by ``oracle.py``; each leak has a fixed twin.
"""

from __future__ import annotations

from tests.diagnostics.corpus.cases import CHAIN, CONTAINER, Case, Finding, Grows, leak, quiet

KEPT_METER = """
    class AverageMeter:
        def __init__(self):
            self.values = []

        def update(self, value, n=1):
            self.values.append(value)

    model = nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    meter = AverageMeter()
    for step in range(4):
        loss = model(torch.randn(10, 5)).abs().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        CALL
"""

SUM_METER = """
    class AverageMeter:
        def __init__(self):
            self.sum = 0
            self.count = 0

        def update(self, val, n=1):
            self.sum += val * n
            self.count += n

    model = nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    meter = AverageMeter()
    for step in range(4):
        x = torch.randn(10, 5)
        loss = model(x).abs().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        CALL
    print(meter.sum / meter.count)
"""

STACKED = """
    class Meter:
        def __init__(self):
            self.values = []

        def update(self, *, value):
            self.values.append(value)

        def mean(self):
            return torch.stack(self.values).mean()

    model = nn.Linear(5, 1)
    meter = Meter()
    for step in range(4):
        loss = model(torch.randn(10, 5)).abs().mean()
        loss.backward()
        CALL
    print(meter.mean().item() > 0)
"""

RECORD = """
    def record(store, value):
        store.append(value)

    w = torch.randn(5, requires_grad=True)
    history = []
    for step in range(4):
        loss = (torch.randn(10, 5) @ w).pow(2).mean()
        loss.backward()
        CALL
"""


LOOP = "for step in range(4):"


def _with(code: str, call: str) -> str:
    return code.replace("CALL", call)


HANDED: list[Case] = [
    leak("meter-update-by-keyword", _with(KEPT_METER, "meter.update(value=loss)"), LOOP,
         Finding(CONTAINER, "warning", "meter.update(value=loss)", "meter.update(value=loss.item())"),
         twin="meter-update-by-keyword-item", story="meter.update(val=loss): the value handed by name"),
    quiet("meter-update-by-keyword-item", "twin", _with(KEPT_METER, "meter.update(value=loss.item())"),
          Grows(LOOP, False)),
    leak("meter-update-keyword-after-another", _with(KEPT_METER, "meter.update(n=10, value=loss)"),
         LOOP,
         Finding(CONTAINER, "warning", "meter.update(n=10, value=loss)",
                 "meter.update(n=10, value=loss.item())"),
         story="the keywords in another order"),
    leak("sum-meter-update-by-keyword", _with(SUM_METER, "meter.update(val=loss, n=x.size(0))"),
         LOOP,
         Finding(CHAIN, "warning", "meter.update(val=loss, n=x.size(0))",
                 "meter.update(val=loss.item(), n=x.size(0))"),
         twin="sum-meter-update-by-keyword-item", story="self.sum += val * n, val handed by name"),
    quiet("sum-meter-update-by-keyword-item", "twin",
          _with(SUM_METER, "meter.update(val=loss.item(), n=x.size(0))"),
          Grows(LOOP, False)),
    leak("keyword-only-meter-stacked-later", _with(STACKED, "meter.update(value=loss)"), LOOP,
         Finding(CONTAINER, "warning", "meter.update(value=loss)", "meter.update(value=loss.detach())"),
         twin="keyword-only-meter-stacked-later-detached",
         story="a keyword-only parameter, stacked as tensors later: .detach(), not .item()"),
    quiet("keyword-only-meter-stacked-later-detached", "twin",
          _with(STACKED, "meter.update(value=loss.detach())"),
          Grows(LOOP, False)),
    leak("helper-function-by-keyword", _with(RECORD, "record(history, value=loss)"), LOOP,
         Finding(CONTAINER, "warning", "record(history, value=loss)", "record(history, value=loss.item())"),
         twin="helper-function-by-keyword-item", story="a helper function handed the loss by name"),
    quiet("helper-function-by-keyword-item", "twin", _with(RECORD, "record(history, value=loss.item())"),
          Grows(LOOP, False)),
]
