"""The corpus: snippets a learner writes, each labelled with what the detector must say.

* ``leak``: memory held across loop iterations (a kept loss, carried state, a hook that stores);
* ``cut``: a parameter the optimizer holds never gets a gradient (the path to the loss was cut);
* ``alias``: an in-place write through a ``detach()`` / ``.data`` alias;
* ``twin``: the fixed version of a pitfall (its ``twin`` names it): no warning;
* ``lookalike``: innocent code that reads like a pitfall: no warning.

Each label is first checked in plain torch (``oracle.py``): a leak's live autograd nodes grow at
every visit of its loop's header and a twin's do not; an untrained parameter's ``.grad`` is None at
the end while an optimizer holds it, and the twin's is not; an alias shares the original's memory.

A finding is written ``Finding(rule, severity, at, remedy)``: ``at`` is a fragment of the one line it
must point at, ``remedy`` code its fix must name. Plain data: no torch here (the bench reads it).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

CONTAINER = "graph-kept-by-container"
CHAIN = "graph-chained-across-iterations"
NEVER = "grad-stays-none"
SAVED = "saved-tensor-modified"
ALIAS = "inplace-through-detached-alias"
NO_GRAPH = "backward-without-graph"


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    at: str  # a fragment of the line the finding points at (unique in the code, else give ``line``)
    remedy: str  # code the fix names
    line: int | None = None


@dataclass(frozen=True)
class Grows:
    """Live autograd nodes, counted in plain torch at each visit of the loop header ``at``, grow at
    every visit (a leak); ``grows=False``: they stay bounded (a twin, a look-alike)."""

    at: str
    grows: bool = True


@dataclass(frozen=True)
class Untrained:
    """After the run, each parameter expression has ``.grad is None`` while an optimizer (or a manual
    update) holds it; ``trained=True``: each has a gradient."""

    params: tuple[str, ...]
    trained: bool = False


@dataclass(frozen=True)
class Shares:
    """After the run, ``alias`` and ``original`` share memory (``False``: they do not)."""

    alias: str
    original: str
    shares: bool = True


@dataclass(frozen=True)
class Raises:
    """The run stops with an error whose message holds ``text``."""

    text: str


@dataclass(frozen=True)
class Runs:
    """The run ends without an error (the fixed twin or the look-alike of an error)."""


@dataclass(frozen=True)
class Accumulates:
    """At some visit of the line ``at`` (a backward()), after the parameters were updated since the
    visit before, a parameter's ``.grad`` still holds nonzero values: the gradient an update already
    used is added to again. ``accumulates=False``: never."""

    params: tuple[str, ...]
    at: str
    accumulates: bool = True


@dataclass(frozen=True)
class Stale:
    """After the run, each parameter expression has a ``.grad``, no optimizer holds it, and its values
    are the ones it had when first seen: it is trained by no one. ``stale=False``: an optimizer holds
    it and it changed."""

    params: tuple[str, ...]
    stale: bool = True


@dataclass(frozen=True)
class Cleared:
    """At some visit of the line ``at`` (an optimizer's step()), right after a backward() ran, every
    parameter's ``.grad`` is None or all zeros: the gradients were cleared before the step could use
    them (and where all are None, the step leaves the parameters as they were). ``cleared=False``: at
    no visit."""

    params: tuple[str, ...]
    at: str
    cleared: bool = True


Oracle = Grows | Untrained | Shares | Raises | Runs | Accumulates | Stale | Cleared


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # leak | cut | alias | twin | lookalike
    code: str
    oracle: Oracle
    expect: tuple[Finding, ...] = ()
    twin: str | None = None  # a pitfall's fixed version
    story: str = ""  # where it comes from

    def line_of(self, finding: Finding) -> int:
        if finding.line is not None:
            return finding.line
        hits = [n for n, text in enumerate(self.code.splitlines(), 1) if finding.at in text]
        assert len(hits) == 1, (self.name, finding.at, hits)
        return hits[0]


def _code(text: str) -> str:
    return textwrap.dedent(text).strip("\n") + "\n"


def leak(name: str, code: str, header: str, *findings: Finding, twin: str | None = None,
         story: str = "") -> Case:
    return Case(name, "leak", _code(code), Grows(header), tuple(findings), twin, story)


def cut(name: str, code: str, params: tuple[str, ...], *findings: Finding, twin: str | None = None,
        story: str = "") -> Case:
    return Case(name, "cut", _code(code), Untrained(params), tuple(findings), twin, story)


def quiet(name: str, kind: str, code: str, oracle: Oracle, story: str = "") -> Case:
    return Case(name, kind, _code(code), oracle, (), None, story)


CASES: list[Case] = [
    # ---- kept losses ------------------------------------------------------------------------------
    leak("losses-append-after-backward", """
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for step in range(5):
            x = torch.randn(32, 8)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss)
    """, "for step in range(5):",
        Finding(CONTAINER, "warning", "losses.append(loss)", "losses.append(loss.item())"),
        twin="losses-append-item", story="article 6.1: the loss stored in a list for plotting"),
    quiet("losses-append-item", "twin", """
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for step in range(5):
            x = torch.randn(32, 8)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    """, Grows("for step in range(5):", False)),
    leak("losses-append-no-backward", """
        w = torch.randn(64, requires_grad=True)
        losses = []
        i = 0
        while i < 5:
            x = torch.randn(64)
            loss = (w * x).sigmoid().sum()
            losses.append(loss)
            i += 1
    """, "while i < 5:",
        Finding(CONTAINER, "warning", "losses.append(loss)", "losses.append(loss.item())"),
        twin="losses-append-detach"),
    quiet("losses-append-detach", "twin", """
        w = torch.randn(64, requires_grad=True)
        losses = []
        i = 0
        while i < 5:
            x = torch.randn(64)
            loss = (w * x).sigmoid().sum()
            losses.append(loss.detach())
            i += 1
    """, Grows("while i < 5:", False)),
    leak("total-loss-augassign", """
        model = nn.Linear(10, 1)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        total_loss = 0
        for batch in range(6):
            x, y = torch.randn(16, 10), torch.randn(16, 1)
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total_loss += loss
        print(total_loss / 6)
    """, "for batch in range(6):",
        Finding(CHAIN, "warning", "total_loss += loss", "total_loss += loss.item()"),
        twin="total-loss-item", story="the running total of the epoch's loss"),
    quiet("total-loss-item", "twin", """
        model = nn.Linear(10, 1)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        total_loss = 0
        for batch in range(6):
            x, y = torch.randn(16, 10), torch.randn(16, 1)
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total_loss += loss.item()
        print(total_loss / 6)
    """, Grows("for batch in range(6):", False)),
    leak("running-sum-rebound", """
        w = torch.randn(32, requires_grad=True)
        running = torch.zeros(())
        for epoch in range(2):
            for i in range(3):
                loss = (w * torch.randn(32)).tanh().mean()
                running = running + loss
    """, "for i in range(3):",
        Finding(CHAIN, "warning", "running = running + loss", "running = running + loss.item()"),
        twin="running-sum-detached", story="nested loops: the inner one adds up"),
    quiet("running-sum-detached", "twin", """
        w = torch.randn(32, requires_grad=True)
        running = torch.zeros(())
        for epoch in range(2):
            for i in range(3):
                loss = (w * torch.randn(32)).tanh().mean()
                running = running + loss.detach()
    """, Grows("for i in range(3):", False)),
    leak("metrics-dict-of-lists", """
        model = nn.Linear(6, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        history = {"loss": [], "acc": []}
        for step in range(4):
            x, y = torch.randn(20, 6), torch.randint(0, 3, (20,))
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            history["loss"].append(loss)
            history["acc"].append((logits.argmax(1) == y).float().mean())
    """, "for step in range(4):",
        Finding(CONTAINER, "warning", 'history["loss"].append(loss)', 'history["loss"].append(loss.item())'),
        twin="metrics-dict-item", story="a metrics dict; accuracy from argmax carries no graph"),
    quiet("metrics-dict-item", "twin", """
        model = nn.Linear(6, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        history = {"loss": [], "acc": []}
        for step in range(4):
            x, y = torch.randn(20, 6), torch.randint(0, 3, (20,))
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            history["loss"].append(loss.item())
            history["acc"].append((logits.argmax(1) == y).float().mean())
    """, Grows("for step in range(4):", False)),
    leak("metrics-dict-by-key", """
        w = torch.randn(16, 4, requires_grad=True)
        metrics = {}
        for step in range(4):
            out = torch.randn(8, 16) @ w
            loss = out.pow(2).mean()
            loss.backward()
            metrics[f"loss_{step}"] = loss
    """, "for step in range(4):",
        Finding(CONTAINER, "warning", 'metrics[f"loss_{step}"] = loss',
                'metrics[f"loss_{step}"] = loss.item()'),
        twin="metrics-dict-by-key-item"),
    quiet("metrics-dict-by-key-item", "twin", """
        w = torch.randn(16, 4, requires_grad=True)
        metrics = {}
        for step in range(4):
            out = torch.randn(8, 16) @ w
            loss = out.pow(2).mean()
            loss.backward()
            metrics[f"loss_{step}"] = loss.item()
    """, Grows("for step in range(4):", False)),
    leak("meter-object", """
        class AverageMeter:
            def __init__(self):
                self.values = []

            def update(self, value):
                self.values.append(value)

        model = nn.Linear(5, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        meter = AverageMeter()
        for step in range(4):
            loss = model(torch.randn(10, 5)).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            meter.update(loss)
    """, "for step in range(4):",
        Finding(CONTAINER, "warning", "meter.update(loss)", "meter.update(loss.item())"),
        twin="meter-object-item", story="a meter object keeps every value it is given"),
    quiet("meter-object-item", "twin", """
        class AverageMeter:
            def __init__(self):
                self.values = []

            def update(self, value):
                self.values.append(value)

        model = nn.Linear(5, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        meter = AverageMeter()
        for step in range(4):
            loss = model(torch.randn(10, 5)).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            meter.update(loss.item())
    """, Grows("for step in range(4):", False)),
    leak("deque-of-recent-losses", """
        from collections import deque

        net = nn.Linear(12, 1)
        recent = deque(maxlen=100)
        for step in range(5):
            loss = net(torch.randn(4, 12)).exp().mean()
            recent.append(loss)
        print(sum(recent) / len(recent))
    """, "for step in range(5):",
        Finding(CONTAINER, "warning", "recent.append(loss)", "recent.append(loss.item())"),
        twin="deque-of-recent-floats"),
    quiet("deque-of-recent-floats", "twin", """
        from collections import deque

        net = nn.Linear(12, 1)
        recent = deque(maxlen=100)
        for step in range(5):
            loss = net(torch.randn(4, 12)).exp().mean()
            recent.append(loss.item())
        print(sum(recent) / len(recent))
    """, Grows("for step in range(5):", False)),
    quiet("deque-short-window", "lookalike", """
        from collections import deque

        net = nn.Linear(12, 1)
        last_two = deque(maxlen=2)
        for step in range(6):
            loss = net(torch.randn(4, 12)).exp().mean()
            last_two.append(loss)
    """, Grows("for step in range(6):", False), story="a bounded window holds two graphs, not more"),
    leak("attribute-history", """
        class Trainer:
            def __init__(self, model):
                self.model = model
                self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
                self.history = []

            def step(self, x):
                loss = self.model(x).pow(2).mean()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                self.history.append(loss)

        trainer = Trainer(nn.Linear(3, 1))
        for i in range(4):
            trainer.step(torch.randn(8, 3))
    """, "for i in range(4):",
        Finding(CONTAINER, "warning", "self.history.append(loss)", "self.history.append(loss.item())"),
        twin="attribute-history-item", story="an attribute list of a trainer object"),
    quiet("attribute-history-item", "twin", """
        class Trainer:
            def __init__(self, model):
                self.model = model
                self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
                self.history = []

            def step(self, x):
                loss = self.model(x).pow(2).mean()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                self.history.append(loss.item())

        trainer = Trainer(nn.Linear(3, 1))
        for i in range(4):
            trainer.step(torch.randn(8, 3))
    """, Grows("for i in range(4):", False)),
    leak("epoch-losses-nested", """
        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            epoch_losses = []
            for batch in range(4):
                loss = model(torch.randn(6, 4)).pow(2).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                epoch_losses.extend([loss])
            print(epoch, len(epoch_losses))
    """, "for batch in range(4):",
        Finding(CONTAINER, "warning", "epoch_losses.extend([loss])", "epoch_losses.extend([loss.item()])"),
        twin="epoch-losses-nested-item", story="a list per epoch, filled by the inner loop"),
    quiet("epoch-losses-nested-item", "twin", """
        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            epoch_losses = []
            for batch in range(4):
                loss = model(torch.randn(6, 4)).pow(2).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                epoch_losses.extend([loss.item()])
            print(epoch, len(epoch_losses))
    """, Grows("for batch in range(4):", False)),
    # ---- validation outputs kept without no_grad ---------------------------------------------------
    leak("validation-outputs-appended", """
        model = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 2))
        val_batches = [torch.randn(16, 10) for _ in range(5)]
        predictions = []
        for xv in val_batches:
            predictions.append(model(xv))
        print(torch.cat(predictions).argmax(1))
    """, "for xv in val_batches:",
        Finding(CONTAINER, "warning", "predictions.append(model(xv))", "torch.no_grad()"),
        twin="validation-under-no-grad", story="article 7.1: validation without no_grad"),
    quiet("validation-under-no-grad", "twin", """
        model = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 2))
        val_batches = [torch.randn(16, 10) for _ in range(5)]
        predictions = []
        for xv in val_batches:
            with torch.no_grad():
                predictions.append(model(xv))
        print(torch.cat(predictions).argmax(1))
    """, Grows("for xv in val_batches:", False)),
    leak("validation-comprehension-per-epoch", """
        model = nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        val = [torch.randn(32, 8) for _ in range(3)]
        val_history = []
        for epoch in range(4):
            loss = model(torch.randn(32, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            val_loss = sum([model(xv).pow(2).mean() for xv in val]) / len(val)
            val_history.append(val_loss)
    """, "for epoch in range(4):",
        Finding(CONTAINER, "warning", "val_history.append(val_loss)", "val_history.append(val_loss.item())"),
        twin="validation-comprehension-no-grad", story="a comprehension computes the validation loss"),
    quiet("validation-comprehension-no-grad", "twin", """
        model = nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        val = [torch.randn(32, 8) for _ in range(3)]
        val_history = []
        for epoch in range(4):
            loss = model(torch.randn(32, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                val_loss = sum([model(xv).pow(2).mean() for xv in val]) / len(val)
            val_history.append(val_loss)
    """, Grows("for epoch in range(4):", False)),
    leak("eval-outputs-comprehension", """
        encoder = nn.Sequential(nn.Linear(6, 24), nn.ReLU(), nn.Linear(24, 4))
        batches = [torch.randn(10, 6) for _ in range(4)]
        embeddings = []
        for round in range(3):
            embeddings += [encoder(b) for b in batches]
        print(len(embeddings))
    """, "for round in range(3):",
        Finding(CONTAINER, "warning", "embeddings += [encoder(b) for b in batches]", "torch.no_grad()"),
        twin="eval-outputs-comprehension-no-grad", story="a comprehension inside a loop keeps every output"),
    quiet("eval-outputs-comprehension-no-grad", "twin", """
        encoder = nn.Sequential(nn.Linear(6, 24), nn.ReLU(), nn.Linear(24, 4))
        batches = [torch.randn(10, 6) for _ in range(4)]
        embeddings = []
        for round in range(3):
            with torch.no_grad():
                embeddings += [encoder(b) for b in batches]
        print(len(embeddings))
    """, Grows("for round in range(3):", False)),
    # ---- hooks that store activations ----------------------------------------------------------------
    leak("forward-hook-lambda", """
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        activations = []
        model[1].register_forward_hook(lambda mod, inp, out: activations.append(out))
        for step in range(4):
            loss = model(torch.randn(16, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, "for step in range(4):",
        Finding(CONTAINER, "warning", "activations.append(out)", "activations.append(out.detach())"),
        twin="forward-hook-lambda-detach", story="a hook registered before the loop"),
    quiet("forward-hook-lambda-detach", "twin", """
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        activations = []
        model[1].register_forward_hook(lambda mod, inp, out: activations.append(out.detach()))
        for step in range(4):
            loss = model(torch.randn(16, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Grows("for step in range(4):", False)),
    leak("forward-hook-def-dict", """
        features = {}

        def save_output(name):
            def hook(module, inputs, output):
                features.setdefault(name, []).append(output)
            return hook

        net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
        net[1].register_forward_hook(save_output("relu"))
        opt = torch.optim.Adam(net.parameters())
        for step in range(3):
            loss = net(torch.randn(2, 1, 8, 8)).logsumexp(1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, "for step in range(3):",
        Finding(CONTAINER, "warning", "features.setdefault(name, []).append(output)",
                "features.setdefault(name, []).append(output.detach())"),
        twin="forward-hook-def-dict-detach", story="feature extraction with a named hook"),
    quiet("forward-hook-def-dict-detach", "twin", """
        features = {}

        def save_output(name):
            def hook(module, inputs, output):
                features.setdefault(name, []).append(output.detach())
            return hook

        net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
        net[1].register_forward_hook(save_output("relu"))
        opt = torch.optim.Adam(net.parameters())
        for step in range(3):
            loss = net(torch.randn(2, 1, 8, 8)).logsumexp(1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Grows("for step in range(3):", False)),
    quiet("hook-keeps-latest-only", "lookalike", """
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        latest = {}
        model[1].register_forward_hook(lambda mod, inp, out: latest.update(relu=out))
        for step in range(4):
            loss = model(torch.randn(16, 4)).pow(2).mean()
            loss.backward()
    """, Grows("for step in range(4):", False), story="a hook that overwrites: one graph at a time"),
    # ---- state carried across iterations --------------------------------------------------------------
    leak("clone-carried-across-loop", """
        model = nn.Linear(8, 1)
        x = torch.randn(4, 8, requires_grad=True)
        for epoch in range(5):
            x = x.clone()
            x[:, 0] = 0.0
            loss = model(x).pow(2).mean()
            loss.backward(retain_graph=True)  # added to silence the error
    """, "for epoch in range(5):",
        Finding(CHAIN, "warning", "x = x.clone()", "x = x.detach()"),
        twin="clone-carried-detached", story="article 1: x = x.clone() in a training loop"),
    quiet("clone-carried-detached", "twin", """
        model = nn.Linear(8, 1)
        x = torch.randn(4, 8, requires_grad=True)
        for epoch in range(5):
            x = x.detach()
            x = x.clone()
            x[:, 0] = 0.0
            loss = model(x).pow(2).mean()
            loss.backward()
    """, Grows("for epoch in range(5):", False)),
    quiet("fresh-batch-cloned", "lookalike", """
        model = nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        data = torch.randn(5, 16, 8)
        for i in range(5):
            x = data[i].clone()
            x[:, 0] = 0.0
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Grows("for i in range(5):", False), story="a fresh batch cloned each iteration"),
    leak("while-true-scale", """
        w = torch.ones(3, requires_grad=True)
        x = w * 2
        i = 0
        while True:
            x = x * 1.0
            i += 1
            if i == 5:
                break
    """, "while True:",
        Finding(CHAIN, "warning", "x = x * 1.0", "x = x.detach()"),
        twin="while-true-scale-detached"),
    quiet("while-true-scale-detached", "twin", """
        w = torch.ones(3, requires_grad=True)
        x = w * 2
        i = 0
        while True:
            x = x.detach()
            x = x * 1.0
            i += 1
            if i == 5:
                break
    """, Grows("while True:", False)),
    leak("smoothed-loss", """
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        smooth = 0.0
        for step in range(5):
            loss = model(torch.randn(4, 3)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            smooth = smooth * 0.9 + loss * 0.1
    """, "for step in range(5):",
        Finding(CHAIN, "warning", "smooth = smooth * 0.9 + loss * 0.1", "loss.item()"),
        twin="smoothed-loss-item", story="x = x * a + b: an exponential moving average of the loss"),
    quiet("smoothed-loss-item", "twin", """
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        smooth = 0.0
        for step in range(5):
            loss = model(torch.randn(4, 3)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            smooth = smooth * 0.9 + loss.item() * 0.1
    """, Grows("for step in range(5):", False)),
    leak("ema-weights-without-no-grad", """
        model = nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ema_weight = model.weight.detach().clone()
        for step in range(5):
            loss = model(torch.randn(8, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema_weight = 0.99 * ema_weight + 0.01 * model.weight
    """, "for step in range(5):",
        Finding(CHAIN, "warning", "ema_weight = 0.99 * ema_weight + 0.01 * model.weight",
                "model.weight.detach()"),
        twin="ema-weights-no-grad", story="an EMA of the weights, updated outside no_grad"),
    quiet("ema-weights-no-grad", "twin", """
        model = nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ema_weight = model.weight.detach().clone()
        for step in range(5):
            loss = model(torch.randn(8, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                ema_weight = 0.99 * ema_weight + 0.01 * model.weight
    """, Grows("for step in range(5):", False)),
    quiet("ema-in-place-under-no-grad", "lookalike", """
        model = nn.Linear(4, 2)
        ema = [p.detach().clone() for p in model.parameters()]
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for step in range(4):
            loss = model(torch.randn(5, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                for e, p in zip(ema, model.parameters()):
                    e.mul_(0.9).add_(p, alpha=0.1)
    """, Grows("for step in range(4):", False)),
    leak("rnn-cell-state-retain-graph", """
        cell = nn.RNNCell(4, 8)
        head = nn.Linear(8, 1)
        h = torch.zeros(1, 8)
        for t in range(5):
            h = cell(torch.randn(1, 4), h)
            loss = head(h).pow(2).mean()
            loss.backward(retain_graph=True)
    """, "for t in range(5):",
        Finding(CHAIN, "warning", "h = cell(torch.randn(1, 4), h)", "h = h.detach()"),
        twin="rnn-cell-state-detached", story="a hidden state carried without truncation"),
    quiet("rnn-cell-state-detached", "twin", """
        cell = nn.RNNCell(4, 8)
        head = nn.Linear(8, 1)
        h = torch.zeros(1, 8)
        for t in range(5):
            h = h.detach()
            h = cell(torch.randn(1, 4), h)
            loss = head(h).pow(2).mean()
            loss.backward()
    """, Grows("for t in range(5):", False)),
    leak("gru-stream-state", """
        gru = nn.GRU(3, 6, batch_first=True)
        stream = [torch.randn(1, 4, 3) for _ in range(5)]
        state = torch.zeros(1, 1, 6)
        labels = []
        for chunk in stream:
            out, state = gru(chunk, state)
            labels.append(out.argmax(-1))
    """, "for chunk in stream:",
        Finding(CHAIN, "warning", "out, state = gru(chunk, state)", "state = state.detach()"),
        twin="gru-stream-no-grad", story="an RNN run over a stream, its state carried"),
    quiet("gru-stream-no-grad", "twin", """
        gru = nn.GRU(3, 6, batch_first=True)
        stream = [torch.randn(1, 4, 3) for _ in range(5)]
        state = torch.zeros(1, 1, 6)
        labels = []
        for chunk in stream:
            with torch.no_grad():
                out, state = gru(chunk, state)
            labels.append(out.argmax(-1))
    """, Grows("for chunk in stream:", False)),
    leak("lstm-tuple-state", """
        lstm = nn.LSTM(5, 7)
        h = None
        outputs = []
        for step in range(4):
            out, h = lstm(torch.randn(3, 1, 5), h)
            outputs.append(out[-1].sum().item())
    """, "for step in range(4):",
        Finding(CHAIN, "warning", "out, h = lstm(torch.randn(3, 1, 5), h)", "s.detach() for s in h"),
        twin="lstm-tuple-state-detached", story="an LSTM's (h, c) carried from chunk to chunk"),
    quiet("lstm-tuple-state-detached", "twin", """
        lstm = nn.LSTM(5, 7)
        h = None
        outputs = []
        for step in range(4):
            if h is not None:
                h = tuple(s.detach() for s in h)
            out, h = lstm(torch.randn(3, 1, 5), h)
            outputs.append(out[-1].sum().item())
    """, Grows("for step in range(4):", False)),
    quiet("lstm-truncated-bptt", "lookalike", """
        lstm = nn.LSTM(4, 6)
        head = nn.Linear(6, 1)
        opt = torch.optim.SGD([*lstm.parameters(), *head.parameters()], lr=0.1)
        hidden = (torch.zeros(1, 1, 6), torch.zeros(1, 1, 6))
        for step in range(4):
            hidden = tuple(s.detach() for s in hidden)
            out, hidden = lstm(torch.randn(5, 1, 4), hidden)
            loss = head(out).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Grows("for step in range(4):", False), story="the issue's LSTM with its correct fix"),
    quiet("tbptt-every-third", "lookalike", """
        W = torch.randn(4, 4, requires_grad=True)
        h = torch.zeros(4)
        loss = 0
        for t in range(9):
            h = torch.tanh(W @ h + 1)
            loss = loss + h.sum()
            if t % 3 == 2:
                loss.backward()
                h = h.detach()
                loss = 0
    """, Grows("for t in range(9):", False), story="truncated backprop through time, window 3"),
    quiet("unrolled-then-one-backward", "lookalike", """
        W = torch.randn(4, 4, requires_grad=True)
        h = torch.zeros(4)
        outs = []
        for t in range(4):
            h = torch.tanh(W @ h + 1)
            outs.append(h)
        loss = torch.stack(outs).sum()
        loss.backward()
    """, Grows("for t in range(4):", True), story="outputs kept on purpose, used by one backward()"),
    quiet("accumulate-then-backward", "lookalike", """
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(2):
            total = 0
            for micro in range(3):
                total = total + model(torch.randn(4, 3)).pow(2).mean() / 3
            opt.zero_grad()
            total.backward()
            opt.step()
    """, Grows("for micro in range(3):", True), story="gradient accumulation: one backward per step"),
    quiet("previous-loss-kept", "lookalike", """
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        previous = None
        for step in range(5):
            loss = model(torch.randn(4, 3)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if previous is not None and loss.item() > previous.item():
                print("worse at", step)
            previous = loss
    """, Grows("for step in range(5):", False), story="one old loss kept, not all of them"),
    quiet("features-detached-for-logging", "lookalike", """
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        feats = []
        for i in range(4):
            out = model(torch.randn(2, 4))
            feats.append(out.detach())
            out.sum().backward()
    """, Grows("for i in range(4):", False)),
    # ---- gradient cut in the forward path -------------------------------------------------------------
    cut("detach-between-layers", """
        encoder = nn.Linear(6, 12)
        decoder = nn.Linear(12, 1)
        opt = torch.optim.SGD([*encoder.parameters(), *decoder.parameters()], lr=0.1)
        for step in range(3):
            x = torch.randn(16, 6)
            code = encoder(x).relu().detach()
            loss = decoder(code).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("encoder.weight", "encoder.bias"),
        Finding(NEVER, "warning", "code = encoder(x).relu().detach()", "code = encoder(x).relu()"),
        twin="detach-between-layers-fixed", story="article 7.3: a detach() on the way to the loss"),
    Case("detach-between-layers-fixed", "twin", _code("""
        encoder = nn.Linear(6, 12)
        decoder = nn.Linear(12, 1)
        opt = torch.optim.SGD([*encoder.parameters(), *decoder.parameters()], lr=0.1)
        for step in range(3):
            x = torch.randn(16, 6)
            code = encoder(x).relu()
            loss = decoder(code).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """), Untrained(("encoder.weight", "encoder.bias"), trained=True)),
    cut("data-in-forward", """
        backbone = nn.Sequential(nn.Linear(5, 10), nn.ReLU())
        head = nn.Linear(10, 2)
        model = nn.Sequential(backbone, head)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x, y = torch.randn(8, 5), torch.randint(0, 2, (8,))
        feats = backbone(x).data
        loss = F.cross_entropy(head(feats), y)
        loss.backward()
        opt.step()
    """, ("backbone[0].weight", "backbone[0].bias"),
        Finding(NEVER, "warning", "feats = backbone(x).data", "feats = backbone(x)"),
        twin="data-in-forward-fixed"),
    Case("data-in-forward-fixed", "twin", _code("""
        backbone = nn.Sequential(nn.Linear(5, 10), nn.ReLU())
        head = nn.Linear(10, 2)
        model = nn.Sequential(backbone, head)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x, y = torch.randn(8, 5), torch.randint(0, 2, (8,))
        feats = backbone(x)
        loss = F.cross_entropy(head(feats), y)
        loss.backward()
        opt.step()
    """), Untrained(("backbone[0].weight", "backbone[0].bias"), trained=True)),
    cut("no-grad-around-trained-encoder", """
        encoder = nn.Linear(4, 8)
        classifier = nn.Linear(8, 3)
        params = list(encoder.parameters()) + list(classifier.parameters())
        opt = torch.optim.SGD(params, lr=0.1)
        for step in range(3):
            x, y = torch.randn(10, 4), torch.randint(0, 3, (10,))
            with torch.no_grad():
                z = encoder(x)
            loss = F.cross_entropy(classifier(z), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("encoder.weight", "encoder.bias"),
        Finding(NEVER, "warning", "z = encoder(x)", "z = encoder(x)"),
        twin="no-grad-around-trained-encoder-fixed"),
    Case("no-grad-around-trained-encoder-fixed", "twin", _code("""
        encoder = nn.Linear(4, 8)
        classifier = nn.Linear(8, 3)
        params = list(encoder.parameters()) + list(classifier.parameters())
        opt = torch.optim.SGD(params, lr=0.1)
        for step in range(3):
            x, y = torch.randn(10, 4), torch.randint(0, 3, (10,))
            z = encoder(x)
            loss = F.cross_entropy(classifier(z), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """), Untrained(("encoder.weight", "encoder.bias"), trained=True)),
    cut("requires-grad-false-on-trained-head", """
        backbone = nn.Linear(6, 6)
        head = nn.Linear(6, 1)
        opt = torch.optim.SGD(head.parameters(), lr=0.1)
        for p in head.parameters():
            p.requires_grad = False
        for step in range(3):
            loss = head(backbone(torch.randn(4, 6)).relu()).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("head.weight", "head.bias"),
        Finding(NEVER, "warning", "p.requires_grad = False", "remove `for p in head.parameters():`"),
        twin="requires-grad-false-on-backbone",
        story="meant to freeze the backbone, froze the module the optimizer trains"),
    Case("requires-grad-false-on-backbone", "twin", _code("""
        backbone = nn.Linear(6, 6)
        head = nn.Linear(6, 1)
        opt = torch.optim.SGD(head.parameters(), lr=0.1)
        for p in backbone.parameters():
            p.requires_grad = False
        for step in range(3):
            loss = head(backbone(torch.randn(4, 6)).relu()).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """), Untrained(("head.weight", "head.bias"), trained=True)),
    cut("torch-tensor-rewrap", """
        encoder = nn.Linear(3, 5)
        head = nn.Linear(5, 1)
        opt = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.1)
        for step in range(3):
            h = encoder(torch.randn(7, 3))
            h = torch.tensor(h)
            loss = head(h).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("encoder.weight", "encoder.bias"),
        Finding(NEVER, "warning", "h = torch.tensor(h)", "use it as it is"),
        twin="torch-tensor-rewrap-fixed", story="torch.tensor(t) re-wraps: a new leaf"),
    Case("torch-tensor-rewrap-fixed", "twin", _code("""
        encoder = nn.Linear(3, 5)
        head = nn.Linear(5, 1)
        opt = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.1)
        for step in range(3):
            h = encoder(torch.randn(7, 3))
            loss = head(h).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """), Untrained(("encoder.weight", "encoder.bias"), trained=True)),
    cut("numpy-round-trip", """
        import numpy as np

        encoder = nn.Linear(4, 4)
        head = nn.Linear(4, 1)
        opt = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.1)
        x = torch.randn(9, 4)
        f = encoder(x).detach().numpy()
        f = np.clip(f, 0.0, None)
        loss = head(torch.from_numpy(f)).pow(2).mean()
        loss.backward()
        opt.step()
    """, ("encoder.weight", "encoder.bias"),
        Finding(NEVER, "warning", "f = encoder(x).detach().numpy()", "torch"),
        twin="numpy-round-trip-torch", story="a numpy step in the middle of the forward pass"),
    Case("numpy-round-trip-torch", "twin", _code("""
        import numpy as np

        encoder = nn.Linear(4, 4)
        head = nn.Linear(4, 1)
        opt = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.1)
        x = torch.randn(9, 4)
        f = encoder(x)
        f = torch.clamp(f, min=0.0)
        loss = head(f).pow(2).mean()
        loss.backward()
        opt.step()
    """), Untrained(("encoder.weight", "encoder.bias"), trained=True)),
    cut("item-round-trip", """
        temperature = nn.Linear(4, 1)
        classifier = nn.Linear(4, 3)
        opt = torch.optim.SGD([*temperature.parameters(), *classifier.parameters()], lr=0.1)
        for step in range(3):
            x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
            t = F.softplus(temperature(x)).mean().item() + 1.0
            loss = F.cross_entropy(classifier(x) / t, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("temperature.weight", "temperature.bias"),
        Finding(NEVER, "warning", "t = F.softplus(temperature(x)).mean().item() + 1.0",
                "t = F.softplus(temperature(x)).mean() + 1.0"),
        twin="item-round-trip-fixed", story="a learned temperature turned into a float"),
    Case("item-round-trip-fixed", "twin", _code("""
        temperature = nn.Linear(4, 1)
        classifier = nn.Linear(4, 3)
        opt = torch.optim.SGD([*temperature.parameters(), *classifier.parameters()], lr=0.1)
        for step in range(3):
            x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
            t = F.softplus(temperature(x)).mean() + 1.0
            loss = F.cross_entropy(classifier(x) / t, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """), Untrained(("temperature.weight", "temperature.bias"), trained=True)),
    cut("detach-inside-helper", """
        encoder = nn.Linear(5, 5)
        decoder = nn.Linear(5, 5)
        opt = torch.optim.Adam(list(encoder.parameters()) + list(decoder.parameters()))

        def encode(x):
            z = encoder(x).tanh()
            return z.detach()

        for step in range(3):
            x = torch.randn(4, 5)
            loss = F.mse_loss(decoder(encode(x)), x)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("encoder.weight", "encoder.bias"),
        Finding(NEVER, "warning", "return z.detach()", "return z"),
        twin="detach-inside-helper-fixed", story="article 6.4: a detach() hidden in a helper"),
    Case("detach-inside-helper-fixed", "twin", _code("""
        encoder = nn.Linear(5, 5)
        decoder = nn.Linear(5, 5)
        opt = torch.optim.Adam(list(encoder.parameters()) + list(decoder.parameters()))

        def encode(x):
            z = encoder(x).tanh()
            return z

        for step in range(3):
            x = torch.randn(4, 5)
            loss = F.mse_loss(decoder(encode(x)), x)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """), Untrained(("encoder.weight", "encoder.bias"), trained=True)),
    cut("detach-inside-module-forward", """
        class AutoEncoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(6, 2)
                self.dec = nn.Linear(2, 6)

            def forward(self, x):
                z = self.enc(x).detach()
                return self.dec(z)

        model = AutoEncoder()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            x = torch.randn(8, 6)
            loss = F.mse_loss(model(x), x)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("model.enc.weight", "model.enc.bias"),
        Finding(NEVER, "warning", "z = self.enc(x).detach()", "z = self.enc(x)"),
        twin="detach-inside-module-forward-fixed"),
    Case("detach-inside-module-forward-fixed", "twin", _code("""
        class AutoEncoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(6, 2)
                self.dec = nn.Linear(2, 6)

            def forward(self, x):
                z = self.enc(x)
                return self.dec(z)

        model = AutoEncoder()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            x = torch.randn(8, 6)
            loss = F.mse_loss(model(x), x)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """), Untrained(("model.enc.weight", "model.enc.bias"), trained=True)),
    cut("manual-sgd-detached-branch", """
        w1 = torch.randn(3, 3, requires_grad=True)
        w2 = torch.randn(3, 1, requires_grad=True)
        params = [w1, w2]
        for step in range(3):
            x = torch.randn(5, 3)
            hidden = (x @ w1).relu().detach()
            loss = (hidden @ w2).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                for p in params:
                    if p.grad is not None:
                        p -= 0.1 * p.grad
                        p.grad = None
    """, ("w1",),
        Finding(NEVER, "warning", "hidden = (x @ w1).relu().detach()", "hidden = (x @ w1).relu()"),
        twin="manual-sgd-fixed", story="a hand-written update: what it updates, it meant to train"),
    Case("manual-sgd-fixed", "twin", _code("""
        w1 = torch.randn(3, 3, requires_grad=True)
        w2 = torch.randn(3, 1, requires_grad=True)
        params = [w1, w2]
        for step in range(3):
            x = torch.randn(5, 3)
            hidden = (x @ w1).relu()
            loss = (hidden @ w2).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                for p in params:
                    if p.grad is not None:
                        p -= 0.1 * p.grad
                        p.grad = None
    """), Untrained(("w1",), trained=True)),
    cut("dict-of-modules-while-loop", """
        nets = {"embed": nn.Embedding(10, 4), "out": nn.Linear(4, 10)}
        opt = torch.optim.Adam([p for net in nets.values() for p in net.parameters()], lr=1e-2)
        tokens = torch.randint(0, 10, (12,))
        step = 0
        while step < 3:
            vectors = nets["embed"](tokens)
            logits = nets["out"](vectors.detach())
            loss = F.cross_entropy(logits, tokens)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
    """, ('nets["embed"].weight',),
        Finding(NEVER, "warning", 'logits = nets["out"](vectors.detach())', 'logits = nets["out"](vectors)'),
        twin="dict-of-modules-fixed"),
    Case("dict-of-modules-fixed", "twin", _code("""
        nets = {"embed": nn.Embedding(10, 4), "out": nn.Linear(4, 10)}
        opt = torch.optim.Adam([p for net in nets.values() for p in net.parameters()], lr=1e-2)
        tokens = torch.randint(0, 10, (12,))
        step = 0
        while step < 3:
            vectors = nets["embed"](tokens)
            logits = nets["out"](vectors)
            loss = F.cross_entropy(logits, tokens)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
    """), Untrained(('nets["embed"].weight',), trained=True)),
    # ---- innocent cuts: not what the optimizer trains --------------------------------------------------
    quiet("frozen-backbone", "lookalike", """
        backbone = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        head = nn.Linear(8, 2)
        backbone.requires_grad_(False)
        opt = torch.optim.SGD(head.parameters(), lr=0.1)
        for step in range(3):
            loss = F.cross_entropy(head(backbone(torch.randn(4, 8))), torch.randint(0, 2, (4,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Untrained(("head.weight",), trained=True), story="a frozen backbone"),
    quiet("frozen-backbone-no-grad", "lookalike", """
        backbone = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        head = nn.Linear(8, 2)
        opt = torch.optim.SGD(head.parameters(), lr=0.1)
        for step in range(3):
            with torch.no_grad():
                feats = backbone(torch.randn(4, 8))
            loss = F.cross_entropy(head(feats), torch.randint(0, 2, (4,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Untrained(("head.weight",), trained=True), story="features from a frozen extractor"),
    quiet("frozen-then-optimizer-over-all", "lookalike", """
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
        for p in model[0].parameters():
            p.requires_grad_(False)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            loss = model(torch.randn(4, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Untrained(("model[2].weight",), trained=True), story="freeze first, then an optimizer over all"),
    quiet("teacher-out-of-optimizer", "lookalike", """
        teacher = nn.Linear(6, 3)
        student = nn.Linear(6, 3)
        opt = torch.optim.SGD(student.parameters(), lr=0.1)
        for step in range(3):
            x = torch.randn(8, 6)
            soft = F.softmax(teacher(x).detach() / 2.0, dim=1)
            loss = F.kl_div(F.log_softmax(student(x) / 2.0, dim=1), soft, reduction="batchmean")
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Untrained(("student.weight",), trained=True), story="distillation: the teacher is not trained"),
    quiet("teacher-under-no-grad", "lookalike", """
        teacher = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
        student = nn.Linear(6, 3)
        opt = torch.optim.Adam(student.parameters())
        for step in range(3):
            x = torch.randn(8, 6)
            with torch.no_grad():
                target = teacher(x)
            loss = F.mse_loss(student(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Untrained(("student.weight",), trained=True)),
    quiet("target-clone-detach", "lookalike", """
        model = nn.Linear(4, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            x = torch.randn(5, 4)
            pred = model(x)
            target = pred.clone().detach() * 0.5
            loss = F.mse_loss(pred, target)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Untrained(("model.weight",), trained=True),
        story="article 5.1: a target made with clone().detach()"),
    quiet("target-detach-clone-dqn", "lookalike", """
        q = nn.Linear(4, 2)
        opt = torch.optim.SGD(q.parameters(), lr=0.01)
        for step in range(3):
            s, s2 = torch.randn(8, 4), torch.randn(8, 4)
            with torch.no_grad():
                best_next = q(s2).max(1).values
            target = (1.0 + 0.9 * best_next).detach().clone()
            loss = F.smooth_l1_loss(q(s).max(1).values, target)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Untrained(("q.weight",), trained=True), story="a Q-learning target under no_grad"),
    quiet("gan-detached-fake", "lookalike", """
        G = nn.Linear(2, 4)
        D = nn.Linear(4, 1)
        opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
        opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
        for step in range(2):
            fake = G(torch.randn(8, 2))
            d_loss = F.softplus(D(fake.detach())).mean() + F.softplus(-D(torch.randn(8, 4))).mean()
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()
            g_loss = F.softplus(-D(fake)).mean()
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()
    """, Untrained(("G.weight", "D.weight"), trained=True), story="a GAN: the generator's step reaches G"),
    quiet("logging-detach-in-loop", "lookalike", """
        model = nn.Linear(3, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        norms = []
        for step in range(3):
            out = model(torch.randn(4, 3))
            norms.append(out.detach().norm().item())
            loss = out.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Untrained(("model.weight",), trained=True)),
    quiet("gradient-penalty", "lookalike", """
        critic = nn.Linear(3, 1)
        opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
        x = torch.randn(5, 3, requires_grad=True)
        out = critic(x).sum()
        g, = torch.autograd.grad(out, x, create_graph=True)
        penalty = (g.norm(dim=1) - 1).pow(2).mean()
        opt.zero_grad()
        penalty.backward()
        opt.step()
    """, Untrained(("critic.weight",), trained=True)),
    # ---- in-place writes through a detach() alias ------------------------------------------------------
    Case("detach-alias-zeroed", "alias", _code("""
        x = torch.tensor([1., 2., 3.], requires_grad=True)
        y = x.exp()
        alias = y.detach()
        alias.zero_()
        y.sum().backward()
    """), Raises("modified by an inplace operation"), (
        Finding(SAVED, "error", "alias.zero_()", "alias = y.detach().clone()"),
    ), "detach-clone-zeroed", "article 4.1 / 7.2: detach() shares the memory"),
    Case("detach-clone-zeroed", "twin", _code("""
        x = torch.tensor([1., 2., 3.], requires_grad=True)
        y = x.exp()
        alias = y.detach().clone()
        alias.zero_()
        y.sum().backward()
    """), Shares("alias", "y", shares=False)),
    Case("data-alias-silently-wrong", "alias", _code("""
        w = torch.randn(4, requires_grad=True)
        h = w.sigmoid()
        raw = h.data
        raw.mul_(2)
        loss = h.sum()
        loss.backward()
        print(w.grad)
    """), Shares("raw", "h"), (
        Finding(ALIAS, "error", "raw.mul_(2)", "raw = h.detach().clone()"),
    ), "data-clone-scaled", "a write through .data is not seen by autograd"),
    Case("data-clone-scaled", "twin", _code("""
        w = torch.randn(4, requires_grad=True)
        h = w.sigmoid()
        raw = h.detach().clone()
        raw.mul_(2)
        loss = h.sum()
        loss.backward()
        print(w.grad)
    """), Shares("raw", "h", shares=False)),
    Case("detach-alias-of-leaf", "alias", _code("""
        weights = torch.ones(3, requires_grad=True)
        snapshot = weights.detach()
        snapshot.add_(1.0)
        print(weights)
    """), Shares("snapshot", "weights"), (
        Finding(ALIAS, "warning", "snapshot.add_(1.0)", "snapshot = weights.detach().clone()"),
    ), "clone-detach-snapshot", "article 4.3: detach() used as if it were a copy"),
    Case("clone-detach-snapshot", "twin", _code("""
        weights = torch.ones(3, requires_grad=True)
        snapshot = weights.clone().detach()
        snapshot.add_(1.0)
        print(weights)
    """), Shares("snapshot", "weights", shares=False)),
    quiet("detach-for-reading-only", "lookalike", """
        x = torch.randn(5, requires_grad=True)
        view = x.detach()
        print(view.mean(), view.max())
        (x * 2).sum().backward()
    """, Shares("view", "x"), story="article 5.4: detach() to read is fine"),
]

BY_NAME: dict[str, Case] = {case.name: case for case in CASES}
assert len(BY_NAME) == len(CASES), "case names are unique"
for _case in CASES:
    assert _case.twin is None or _case.twin in BY_NAME, _case.twin

# ---- more spellings of the same stories (written after the rules, to test that they generalise) ----
CASES += [
    leak("losses-plus-equals-list", """
        net = nn.Linear(3, 3)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        losses = []
        n = 0
        while n < 4:
            loss = net(torch.randn(5, 3)).norm()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses += [loss]
            n += 1
    """, "while n < 4:",
        Finding(CONTAINER, "warning", "losses += [loss]", "losses += [loss.item()]"),
        twin="losses-plus-equals-list-item"),
    quiet("losses-plus-equals-list-item", "twin", """
        net = nn.Linear(3, 3)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        losses = []
        n = 0
        while n < 4:
            loss = net(torch.randn(5, 3)).norm()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses += [loss.item()]
            n += 1
    """, Grows("while n < 4:", False)),
    leak("setdefault-history", """
        model = nn.Linear(4, 1)
        opt = torch.optim.Adam(model.parameters())
        log = {}
        for it in range(4):
            loss = (model(torch.randn(3, 4)) - 1).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            log.setdefault("loss", []).append(loss)
    """, "for it in range(4):",
        Finding(CONTAINER, "warning", 'log.setdefault("loss", []).append(loss)',
                'log.setdefault("loss", []).append(loss.item())'), twin=None),
    leak("dict-item-running-sum", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        stats = {"sum": 0.0, "count": 0}
        for it in range(5):
            loss = model(torch.randn(3, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            stats["sum"] += loss
            stats["count"] += 1
    """, "for it in range(5):",
        Finding(CHAIN, "warning", 'stats["sum"] += loss', 'stats["sum"] += loss.item()')),
    leak("outputs-concatenated", """
        model = nn.Linear(6, 2)
        outputs = torch.empty(0, 2)
        for batch in [torch.randn(4, 6) for _ in range(4)]:
            out = model(batch)
            outputs = torch.cat([outputs, out])
        print(outputs.shape)
    """, "for batch in [torch.randn(4, 6) for _ in range(4)]:",
        Finding(CHAIN, "warning", "outputs = torch.cat([outputs, out])", "out.detach()")),
    leak("insert-at-front", """
        w = torch.randn(10, requires_grad=True)
        recent = []
        for step in range(4):
            loss = (w.sin() * step).sum()
            recent.insert(0, loss)
    """, "for step in range(4):",
        Finding(CONTAINER, "warning", "recent.insert(0, loss)", "recent.insert(0, loss.item())")),
    leak("train-epoch-function", """
        model = nn.Linear(5, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def train_epoch(batches):
            epoch_loss = 0
            for xb in batches:
                loss = model(xb).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                epoch_loss = epoch_loss + loss
            return epoch_loss

        for epoch in range(2):
            print(train_epoch([torch.randn(8, 5) for _ in range(4)]))
    """, "for xb in batches:",
        Finding(CHAIN, "warning", "epoch_loss = epoch_loss + loss", "epoch_loss = epoch_loss + loss.item()")),
    leak("module-attribute-hidden-state", """
        class Stateful(nn.Module):
            def __init__(self):
                super().__init__()
                self.cell = nn.GRUCell(3, 5)
                self.hidden = torch.zeros(1, 5)

            def forward(self, x):
                self.hidden = self.cell(x, self.hidden)
                return self.hidden.sum()

        net = Stateful()
        for t in range(5):
            score = net(torch.randn(1, 3))
    """, "for t in range(5):",
        Finding(CHAIN, "warning", "self.hidden = self.cell(x, self.hidden)", "detach()")),
    leak("ema-of-outputs", """
        model = nn.Linear(3, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ema_out = torch.zeros(8, 3)
        for step in range(4):
            out = model(torch.randn(8, 3))
            loss = out.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema_out = 0.9 * ema_out + 0.1 * out
    """, "for step in range(4):",
        Finding(CHAIN, "warning", "ema_out = 0.9 * ema_out + 0.1 * out", "out.detach()")),
    leak("extend-rows", """
        encoder = nn.Linear(4, 2)
        rows = []
        for i in range(3):
            rows.extend(encoder(torch.randn(2, 4)))
        print(len(rows))
    """, "for i in range(3):",
        Finding(CONTAINER, "warning", "rows.extend(encoder(torch.randn(2, 4)))", "torch.no_grad()")),
    quiet("best-loss-kept", "lookalike", """
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        best = None
        for step in range(5):
            loss = model(torch.randn(4, 3)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if best is None or loss.item() < best:
                best = loss.item()
    """, Grows("for step in range(5):", False)),
    quiet("grad-norms-logged", "lookalike", """
        model = nn.Linear(4, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        norms = []
        for step in range(4):
            loss = model(torch.randn(2, 4)).pow(2).sum()
            opt.zero_grad()
            loss.backward()
            norms.append(torch.stack([p.grad.norm() for p in model.parameters()]).sum())
            opt.step()
    """, Grows("for step in range(4):", False), story=".grad carries no graph"),
    quiet("detach-at-end-of-iteration", "lookalike", """
        rnn = nn.RNNCell(2, 4)
        h = torch.zeros(1, 4)
        for t in range(5):
            h = rnn(torch.randn(1, 2), h)
            h.sum().backward()
            h = h.detach()
    """, Grows("for t in range(5):", False)),
    quiet("no-grad-decorated-ema", "lookalike", """
        student = nn.Linear(4, 4)
        teacher = nn.Linear(4, 4)
        teacher.load_state_dict(student.state_dict())
        opt = torch.optim.SGD(student.parameters(), lr=0.1)

        @torch.no_grad()
        def update_teacher():
            for t, s in zip(teacher.parameters(), student.parameters()):
                t.mul_(0.99).add_(0.01 * s)

        for step in range(3):
            x = torch.randn(5, 4)
            loss = F.mse_loss(student(x), teacher(x).detach())
            opt.zero_grad()
            loss.backward()
            opt.step()
            update_teacher()
    """, Untrained(("student.weight",), trained=True), story="mean teacher: the teacher follows by EMA"),
    quiet("filter-requires-grad", "lookalike", """
        model = nn.Sequential(nn.Embedding(20, 4), nn.Flatten(), nn.Linear(12, 1))
        model[0].weight.requires_grad = False
        opt = torch.optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=1e-3)
        for step in range(3):
            loss = model(torch.randint(0, 20, (5, 3))).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Untrained(("model[2].weight",), trained=True), story="frozen embeddings, optimizer over the rest"),
    cut("detach-in-comprehension", """
        enc = nn.Linear(3, 3)
        head = nn.Linear(3, 1)
        opt = torch.optim.SGD([*enc.parameters(), *head.parameters()], lr=0.1)
        xs = [torch.randn(2, 3) for _ in range(4)]
        for step in range(2):
            feats = torch.stack([enc(xi).detach() for xi in xs])
            loss = head(feats).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("enc.weight", "enc.bias"),
        Finding(NEVER, "warning", "feats = torch.stack([enc(xi).detach() for xi in xs])",
                "feats = torch.stack([enc(xi) for xi in xs])")),
    cut("set-grad-enabled-false", """
        backbone = nn.Linear(4, 4)
        head = nn.Linear(4, 2)
        opt = torch.optim.Adam(list(backbone.parameters()) + list(head.parameters()))
        for step in range(2):
            x = torch.randn(6, 4)
            with torch.set_grad_enabled(False):
                f = backbone(x).relu()
            loss = head(f).logsumexp(1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("backbone.weight", "backbone.bias"),
        Finding(NEVER, "warning", "f = backbone(x).relu()", "f = backbone(x).relu()")),
    cut("requires-grad-underscore-on-head", """
        model = nn.Sequential(nn.Linear(5, 5), nn.Tanh(), nn.Linear(5, 1))
        opt = torch.optim.SGD(model[2].parameters(), lr=0.1)
        model[2].requires_grad_(False)
        for step in range(2):
            loss = model(torch.randn(3, 5)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("model[2].weight", "model[2].bias"),
        Finding(NEVER, "warning", "model[2].requires_grad_(False)", "model[2].requires_grad_(False)")),
    cut("cpu-numpy-tensor", """
        encoder = nn.Linear(3, 3)
        decoder = nn.Linear(3, 3)
        opt = torch.optim.SGD([*encoder.parameters(), *decoder.parameters()], lr=0.1)
        x = torch.randn(4, 3)
        z = encoder(x).detach().cpu().numpy()
        z = torch.tensor(z * 2)
        loss = F.mse_loss(decoder(z), x)
        loss.backward()
        opt.step()
    """, ("encoder.weight", "encoder.bias"),
        Finding(NEVER, "warning", "z = encoder(x).detach().cpu().numpy()", "torch")),
    cut("tolist-round-trip", """
        scorer = nn.Linear(3, 1)
        net = nn.Linear(3, 2)
        opt = torch.optim.SGD([*scorer.parameters(), *net.parameters()], lr=0.1)
        x = torch.randn(4, 3)
        weights = scorer(x).squeeze(1).softmax(0).tolist()
        loss = (net(x).pow(2).sum(1) * torch.tensor(weights)).sum()
        loss.backward()
        opt.step()
    """, ("scorer.weight", "scorer.bias"),
        Finding(NEVER, "warning", "weights = scorer(x).squeeze(1).softmax(0).tolist()", "torch")),
    cut("inline-weight-detach", """
        layer = nn.Linear(4, 2)
        opt = torch.optim.SGD(layer.parameters(), lr=0.1)
        for step in range(3):
            x = torch.randn(5, 4)
            out = F.linear(x, layer.weight.detach(), layer.bias)
            loss = out.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("layer.weight",),
        Finding(NEVER, "warning", "out = F.linear(x, layer.weight.detach(), layer.bias)",
                "out = F.linear(x, layer.weight, layer.bias)")),
    cut("functional-params-dict", """
        params = {"w": torch.randn(3, 3, requires_grad=True), "b": torch.zeros(3, requires_grad=True)}
        opt = torch.optim.SGD(params.values(), lr=0.1)
        for step in range(2):
            x = torch.randn(4, 3)
            w = params["w"].detach()
            loss = (x @ w + params["b"]).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ('params["w"]',),
        Finding(NEVER, "warning", 'w = params["w"].detach()', 'w = params["w"]')),
    Case("inline-detach-index-write", "alias", _code("""
        x = torch.randn(4, requires_grad=True)
        y = x.sigmoid()
        y.detach()[0] = 0.0
        y.sum().backward()
    """), Raises("modified by an inplace operation"), (
        Finding(SAVED, "error", "y.detach()[0] = 0.0", ".clone()"),
    )),
    Case("alias-augassign", "alias", _code("""
        a = torch.ones(3, requires_grad=True)
        b = a.detach()
        b += 1
        print(a)
    """), Shares("b", "a"), (
        Finding(ALIAS, "warning", "b += 1", "b = a.detach().clone()"),
    )),
]
BY_NAME = {case.name: case for case in CASES}
assert len(BY_NAME) == len(CASES), "case names are unique"

# ---- a third batch of spellings (written blind, after the rules) ----------------------------------------
CASES += [
    leak("list-item-smoothing", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        state = [0.0]
        for step in range(4):
            loss = model(torch.randn(3, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            state[0] = state[0] * 0.9 + loss
    """, "for step in range(4):",
        Finding(CHAIN, "warning", "state[0] = state[0] * 0.9 + loss",
                "state[0] = state[0] * 0.9 + loss.item()")),
    leak("evaluate-function-outputs", """
        def evaluate(net, batches):
            outs = []
            for xb in batches:
                outs.append(net(xb))
            return outs

        net = nn.Sequential(nn.Linear(5, 5), nn.ReLU())
        batches = [torch.randn(2, 5) for _ in range(4)]
        results = evaluate(net, batches)
    """, "for xb in batches:",
        Finding(CONTAINER, "warning", "outs.append(net(xb))", "torch.no_grad()")),
    leak("while-next-history", """
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = torch.optim.Adam(model.parameters())
        it = iter([torch.randn(6, 4) for _ in range(5)])
        history = []
        while True:
            try:
                xb = next(it)
            except StopIteration:
                break
            loss = model(xb).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            history += [loss]
    """, "while True:",
        Finding(CONTAINER, "warning", "history += [loss]", "history += [loss.item()]")),
    cut("no-grad-on-a-submodule", """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = nn.Linear(4, 4)
                self.head = nn.Linear(4, 2)

        model = Net()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for step in range(3):
            x = torch.randn(5, 4)
            with torch.no_grad():
                h = model.encoder(x).relu()
            loss = F.cross_entropy(model.head(h), torch.randint(0, 2, (5,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("model.encoder.weight", "model.encoder.bias"),
        Finding(NEVER, "warning", "h = model.encoder(x).relu()", "h = model.encoder(x).relu()")),
    cut("tolist-as-tensor", """
        scorer = nn.Linear(3, 1)
        net = nn.Linear(3, 2)
        opt = torch.optim.SGD([*scorer.parameters(), *net.parameters()], lr=0.1)
        x = torch.randn(4, 3)
        weights = torch.as_tensor(scorer(x).squeeze(1).tolist())
        loss = (net(x).pow(2).sum(1) * weights).sum()
        loss.backward()
        opt.step()
    """, ("scorer.weight", "scorer.bias"),
        Finding(NEVER, "warning", "weights = torch.as_tensor(scorer(x).squeeze(1).tolist())", ".tolist()")),
    quiet("backward-hook-keeps-grads", "lookalike", """
        model = nn.Linear(4, 4)
        grads = []
        model.register_full_backward_hook(lambda m, gin, gout: grads.append(gout[0]))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            loss = model(torch.randn(2, 4)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, Grows("for step in range(3):", False), story="gradients a hook stores carry no graph"),
]
BY_NAME = {case.name: case for case in CASES}
assert len(BY_NAME) == len(CASES), "case names are unique"

# ---- several statements on one line (the engine steps by line: the line's facts are all of them) ------
CASES += [
    leak("one-line-step-keeps-losses", """
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for i in range(4):
            xb = torch.randn(2, 3)
            loss = model(xb).sum(); opt.zero_grad(); loss.backward(); opt.step(); losses.append(loss)
    """, "for i in range(4):",
        Finding(CONTAINER, "warning", "losses.append(loss)", "losses.append(loss.item())"),
        twin="one-line-step-keeps-floats", story="a whole training step written on one line"),
    quiet("one-line-step-keeps-floats", "twin", """
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for i in range(4):
            xb = torch.randn(2, 3)
            loss = model(xb).sum(); opt.zero_grad(); loss.backward(); opt.step(); losses.append(loss.item())
    """, Grows("for i in range(4):", False)),
    cut("data-cut-one-line-step", """
        enc = nn.Linear(3, 3)
        head = nn.Linear(3, 1)
        opt = torch.optim.Adam(list(enc.parameters()) + list(head.parameters()))
        for _ in range(2):
            z = enc(torch.randn(4, 3)).data
            loss = head(z).tanh().mean()
            opt.zero_grad(); loss.backward(); opt.step()
    """, ("enc.weight", "enc.bias"),
        Finding(NEVER, "warning", "z = enc(torch.randn(4, 3)).data", "z = enc(torch.randn(4, 3))"),
        twin="data-removed-one-line-step"),
    quiet("data-removed-one-line-step", "twin", """
        enc = nn.Linear(3, 3)
        head = nn.Linear(3, 1)
        opt = torch.optim.Adam(list(enc.parameters()) + list(head.parameters()))
        for _ in range(2):
            z = enc(torch.randn(4, 3))
            loss = head(z).tanh().mean()
            opt.zero_grad(); loss.backward(); opt.step()
    """, Untrained(("enc.weight", "enc.bias"), trained=True)),
]
BY_NAME = {case.name: case for case in CASES}
assert len(BY_NAME) == len(CASES), "case names are unique"

# ---- a list grown by concatenation; a numpy round trip through a detached value --------------------------
CASES += [
    leak("losses-concatenated", """
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for i in range(4):
            loss = model(torch.randn(2, 3)).sigmoid().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses = losses + [loss]
    """, "for i in range(4):",
        Finding(CONTAINER, "warning", "losses = losses + [loss]", "losses = losses + [loss.item()]"),
        twin="losses-concatenated-item", story="xs = xs + [x], the += spelled out"),
    quiet("losses-concatenated-item", "twin", """
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for i in range(4):
            loss = model(torch.randn(2, 3)).sigmoid().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses = losses + [loss.item()]
    """, Grows("for i in range(4):", False)),
    cut("detach-numpy-from-numpy", """
        enc = nn.Linear(3, 3)
        head = nn.Linear(3, 1)
        opt = torch.optim.SGD([*enc.parameters(), *head.parameters()], lr=0.1)
        x = torch.randn(4, 3)
        f = torch.from_numpy(enc(x).detach().numpy() * 2)
        loss = head(f).mean()
        loss.backward()
        opt.step()
    """, ("enc.weight", "enc.bias"),
        Finding(NEVER, "warning", "f = torch.from_numpy(enc(x).detach().numpy() * 2)", "on `enc(x)`")),
]
BY_NAME = {case.name: case for case in CASES}
assert len(BY_NAME) == len(CASES), "case names are unique"

# ---- training-loop pitfalls (tests/diagnostics/corpus/training.py) ------------------------------------
from tests.diagnostics.corpus.training import TRAINING  # noqa: E402 - they use the helpers above

CASES += TRAINING

from tests.diagnostics.corpus.cleared import CLEARED  # noqa: E402 - they use the helpers above

CASES += CLEARED

from tests.diagnostics.corpus.handed import HANDED  # noqa: E402 - they use the helpers above

CASES += HANDED
BY_NAME = {case.name: case for case in CASES}
assert len(BY_NAME) == len(CASES), "case names are unique"

from tests.diagnostics.corpus.bundled import BUNDLED  # noqa: E402 - they use the helpers above

CASES += BUNDLED
BY_NAME = {case.name: case for case in CASES}
assert len(BY_NAME) == len(CASES), "case names are unique"
