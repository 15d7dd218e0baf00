"""Training-loop pitfalls of the corpus (``cases.py`` adds them to ``CASES``): a tensor made in
inference mode that autograd then needs. Each labelled as in ``cases.py`` and checked in plain torch
by ``oracle.py``; each error has a fixed twin and innocent look-alikes that must stay quiet.
"""

from __future__ import annotations

from tests.diagnostics.corpus.cases import (
    CHAIN,
    CONTAINER,
    Accumulates,
    Case,
    Finding,
    Grows,
    Raises,
    Runs,
    Stale,
    _code,
    leak,
    quiet,
)

INFERENCE = "inference-tensor-in-autograd"
ACCUMULATE = "grads-accumulate-across-steps"
REPLACED = "optimizer-holds-replaced-params"
SAVED = "Inference tensors cannot be saved for backward"


def error(name: str, code: str, text: str, *findings: Finding, twin: str | None = None,
          story: str = "") -> Case:
    return Case(name, "error", _code(code), Raises(text), tuple(findings), twin, story)


def piles(name: str, code: str, params: tuple[str, ...], at: str, *findings: Finding,
          twin: str | None = None, story: str = "") -> Case:
    return Case(name, "accumulate", _code(code), Accumulates(params, at), tuple(findings), twin, story)


def apart(name: str, kind: str, code: str, params: tuple[str, ...], at: str, story: str = "") -> Case:
    return Case(name, kind, _code(code), Accumulates(params, at, False), (), None, story)


def stale(name: str, code: str, params: tuple[str, ...], *findings: Finding, twin: str | None = None,
          story: str = "") -> Case:
    return Case(name, "stale", _code(code), Stale(params), tuple(findings), twin, story)


def trains(name: str, kind: str, code: str, params: tuple[str, ...], story: str = "") -> Case:
    return Case(name, kind, _code(code), Stale(params, False), (), None, story)


def runs(name: str, kind: str, code: str, story: str = "") -> Case:
    return Case(name, kind, _code(code), Runs(), (), None, story)


TRAINING: list[Case] = [
    # ---- a tensor made under torch.inference_mode() ---------------------------------------------------
    error("inference-input-saved", """
        w = torch.randn(4, requires_grad=True)
        with torch.inference_mode():
            x = torch.randn(8, 4) * 2
        y = (x * w).sum()
        y.backward()
    """, SAVED, Finding(INFERENCE, "error", "y = (x * w).sum()", "torch.no_grad()"),
        twin="inference-input-no-grad", story="inputs prepared in inference mode, then used with a weight"),
    runs("inference-input-no-grad", "twin", """
        w = torch.randn(4, requires_grad=True)
        with torch.no_grad():
            x = torch.randn(8, 4) * 2
        y = (x * w).sum()
        y.backward()
    """),
    runs("inference-input-cloned", "twin", """
        w = torch.randn(4, requires_grad=True)
        with torch.inference_mode():
            x = torch.randn(8, 4) * 2
        x = x.clone()
        y = (x * w).sum()
        y.backward()
    """),
    runs("inference-input-added", "lookalike", """
        w = torch.randn(4, requires_grad=True)
        with torch.inference_mode():
            x = torch.randn(8, 4) * 2
        y = (x + w).sum()
        y.backward()
    """, story="an add saves neither input: torch lets it through"),
    error("inference-batches-in-loop", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def load_batch():
            x = torch.randn(8, 4)
            return (x - x.mean()) / x.std()

        with torch.inference_mode():
            batches = [load_batch() for _ in range(3)]
        for x in batches:
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, SAVED, Finding(INFERENCE, "error", "loss = model(x).pow(2).mean()", "torch.no_grad()"),
        story="a dataset pre-processed under inference_mode, trained on later"),
    error("inference-teacher-targets", """
        teacher = nn.Linear(4, 2)
        student = nn.Linear(4, 2)
        opt = torch.optim.Adam(student.parameters(), lr=1e-3)
        for step in range(3):
            x = torch.randn(8, 4)
            with torch.inference_mode():
                target = teacher(x)
            loss = F.mse_loss(student(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, SAVED, Finding(INFERENCE, "error", "loss = F.mse_loss(student(x), target)", "torch.no_grad()"),
        twin="teacher-targets-no-grad", story="distillation: the teacher's outputs as targets"),
    runs("teacher-targets-no-grad", "twin", """
        teacher = nn.Linear(4, 2)
        student = nn.Linear(4, 2)
        opt = torch.optim.Adam(student.parameters(), lr=1e-3)
        for step in range(3):
            x = torch.randn(8, 4)
            with torch.no_grad():
                target = teacher(x)
            loss = F.mse_loss(student(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """),
    runs("teacher-labels-from-inference", "lookalike", """
        teacher = nn.Linear(4, 3)
        student = nn.Linear(4, 3)
        opt = torch.optim.SGD(student.parameters(), lr=0.1)
        for step in range(3):
            x = torch.randn(8, 4)
            with torch.inference_mode():
                logits = teacher(x)
            labels = logits.argmax(1)
            loss = F.cross_entropy(student(x), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, story="argmax outside inference mode makes a normal tensor: torch trains on it"),
    error("inference-decorated-then-scaled", """
        @torch.inference_mode()
        def normalise(t):
            return (t - t.mean()) / t.std()

        x = normalise(torch.randn(8, 4))
        x.mul_(2)
    """, "Inplace update to inference tensor outside InferenceMode",
        Finding(INFERENCE, "error", "x.mul_(2)", "torch.no_grad()"),
        story="a helper decorated with inference_mode; its result changed in place"),
    error("inference-weights-require-grad", """
        with torch.inference_mode():
            w = torch.randn(3)
        w.requires_grad_()
        loss = (w * torch.randn(3)).sum()
        loss.backward()
    """, "Setting requires_grad=True on inference tensor outside InferenceMode",
        Finding(INFERENCE, "error", "w.requires_grad_()", "torch.no_grad()"),
        story="weights initialised in inference mode, then made trainable"),
    error("inference-view-written", """
        with torch.inference_mode():
            x = torch.randn(4, 3)
        y = x.view(2, 6)
        y.add_(1)
    """, "Inplace update to inference tensor outside InferenceMode",
        Finding(INFERENCE, "error", "y.add_(1)", "torch.no_grad()"),
        story="a view taken outside inference mode is still an inference tensor: made where x was"),
    runs("inference-evaluation-only", "lookalike", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.inference_mode():
            score = model(torch.randn(8, 4)).mean()
        print(score.item() == score.item())
    """, story="evaluation in inference mode after training: what it is for"),

    # ---- gradients never zeroed between steps -------------------------------------------------------
    piles("no-zero-grad-sgd", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            opt.step()
    """, ("model.weight", "model.bias"), "loss.backward()",
        Finding(ACCUMULATE, "warning", "loss.backward()", "opt.zero_grad()"),
        twin="zero-grad-set-to-none", story="the loop every tutorial shows, without its zero_grad()"),
    apart("zero-grad-set-to-none", "twin", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            opt.zero_grad(set_to_none=True)
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            opt.step()
    """, ("model.weight", "model.bias"), "loss.backward()"),
    apart("zero-grad-keeping-zeros", "twin", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
    """, ("model.weight", "model.bias"), "loss.backward()", story="zeroed in place, after the step"),
    apart("model-zero-grad", "twin", """
        net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
        i = 0
        while i < 4:
            net.zero_grad()
            out = net(torch.randn(8, 4))
            F.mse_loss(out, torch.zeros(8, 1)).backward()
            optimizer.step()
            i += 1
    """, ("net[0].weight", "net[2].bias"), "F.mse_loss(out, torch.zeros(8, 1)).backward()"),
    piles("no-zero-grad-while-adam", """
        net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
        i = 0
        while i < 4:
            out = net(torch.randn(8, 4))
            F.mse_loss(out, torch.zeros(8, 1)).backward()
            optimizer.step()
            i += 1
    """, ("net[0].weight", "net[2].bias"), "F.mse_loss(out, torch.zeros(8, 1)).backward()",
        Finding(ACCUMULATE, "warning", "F.mse_loss(out, torch.zeros(8, 1)).backward()",
                "optimizer.zero_grad()"),
        twin="model-zero-grad"),
    piles("no-zero-grad-with-clipping", """
        rnn = nn.GRUCell(3, 4)
        head = nn.Linear(4, 1)
        opt = torch.optim.SGD([*rnn.parameters(), *head.parameters()], lr=0.05)
        for step in range(3):
            h = rnn(torch.randn(2, 3))
            loss = head(h).pow(2).mean()
            loss.backward()
            nn.utils.clip_grad_norm_(rnn.parameters(), 1.0)
            opt.step()
    """, ("head.weight",), "loss.backward()",
        Finding(ACCUMULATE, "warning", "loss.backward()", "opt.zero_grad()"),
        story="clipping writes the gradients; it does not clear them"),
    piles("no-zero-grad-in-helper", """
        model = nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def train_step(x, y):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.item()

        for epoch in range(3):
            train_step(torch.randn(6, 3), torch.randint(0, 2, (6,)))
    """, ("model.weight",), "loss.backward()",
        Finding(ACCUMULATE, "warning", "loss.backward()", "opt.zero_grad()"),
        story="the step in a helper the loop calls"),
    piles("no-zero-grad-by-hand", """
        w = torch.randn(3, requires_grad=True)
        b = torch.zeros(1, requires_grad=True)
        lr = 0.1
        for step in range(4):
            x = torch.randn(5, 3)
            loss = ((x @ w + b) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                w -= lr * w.grad
                b -= lr * b.grad
    """, ("w", "b"), "loss.backward()",
        Finding(ACCUMULATE, "warning", "loss.backward()", "w.grad = None"),
        twin="by-hand-grads-cleared", story="gradient descent by hand"),
    piles("no-zero-grad-by-hand-list", """
        w = torch.randn(3, requires_grad=True)
        b = torch.zeros(1, requires_grad=True)
        params = [w, b]
        for step in range(4):
            loss = ((torch.randn(5, 3) @ w + b) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p -= 0.1 * p.grad
    """, ("w", "b"), "loss.backward()",
        Finding(ACCUMULATE, "warning", "loss.backward()", "p.grad = None"),
        story="the update written as a loop over a list of parameters"),
    piles("tutorial-by-hand-without-zero-grad", """
        x = torch.linspace(-math.pi, math.pi, 200)
        y = torch.sin(x)
        xx = x.unsqueeze(-1).pow(torch.tensor([1, 2, 3]))
        model = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0, 1))
        loss_fn = torch.nn.MSELoss(reduction="sum")
        for t in range(4):
            loss = loss_fn(model(xx), y)
            loss.backward()
            with torch.no_grad():
                for param in model.parameters():
                    param -= 1e-6 * param.grad
    """, ("model[0].weight", "model[0].bias"), "loss.backward()",
        Finding(ACCUMULATE, "warning", "loss.backward()", "param.grad = None"),
        story="'Learning PyTorch with examples' (nn module) without its model.zero_grad()"),
    apart("by-hand-grads-cleared", "twin", """
        w = torch.randn(3, requires_grad=True)
        b = torch.zeros(1, requires_grad=True)
        lr = 0.1
        for step in range(4):
            x = torch.randn(5, 3)
            loss = ((x @ w + b) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                w -= lr * w.grad
                b -= lr * b.grad
                w.grad.zero_()
                b.grad.zero_()
    """, ("w", "b"), "loss.backward()"),
    apart("accumulate-every-two-batches", "lookalike", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(6):
            loss = model(torch.randn(8, 4)).pow(2).mean() / 2
            loss.backward()
            if (i + 1) % 2 == 0:
                opt.step()
                opt.zero_grad()
    """, ("model.weight", "model.bias"), "loss.backward()",
        story="gradient accumulation on purpose: a step every two batches, then zeroed"),
    apart("gan-two-optimizers", "lookalike", """
        G = nn.Linear(2, 3)
        D = nn.Linear(3, 1)
        g_opt = torch.optim.Adam(G.parameters(), lr=1e-3)
        d_opt = torch.optim.Adam(D.parameters(), lr=1e-3)
        for step in range(3):
            real, z = torch.randn(4, 3), torch.randn(4, 2)
            d_opt.zero_grad()
            d_loss = D(real).mean() - D(G(z).detach()).mean()
            d_loss.backward()
            d_opt.step()
            g_opt.zero_grad()
            g_loss = -D(G(z)).mean()
            g_loss.backward()
            g_opt.step()
    """, ("D.weight", "D.bias"), "d_loss.backward()",
        story="the generator's backward adds into D's gradients; D clears them before its own step"),

    # ---- an optimizer built on parameters the code then replaces ------------------------------------
    stale("optimizer-before-model-rebuilt", """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 1)

            def forward(self, x):
                return self.fc(x)

        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model = Net()
        for step in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("model.fc.weight", "model.fc.bias"),
        Finding(REPLACED, "warning", "model = Net()", "opt = torch.optim.SGD(model.parameters(), lr=0.1)",
                line=11),
        twin="optimizer-after-model-rebuilt",
        story="a cell run again: the model made anew, not the optimizer"),
    trains("optimizer-after-model-rebuilt", "twin", """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 1)

            def forward(self, x):
                return self.fc(x)

        model = Net()
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("model.fc.weight", "model.fc.bias")),
    stale("head-swapped-after-optimizer", """
        backbone = nn.Sequential(nn.Linear(6, 4), nn.ReLU())
        model = nn.Sequential(backbone, nn.Linear(4, 3))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        model[1] = nn.Linear(4, 2)
        for step in range(3):
            x, y = torch.randn(5, 6), torch.randint(0, 2, (5,))
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("model[1].weight", "model[1].bias"),
        Finding(REPLACED, "warning", "model[1] = nn.Linear(4, 2)",
                "opt = torch.optim.Adam(model.parameters()"),
        twin="head-swapped-param-group", story="transfer learning: a new head after the optimizer was made"),
    trains("head-swapped-param-group", "twin", """
        backbone = nn.Sequential(nn.Linear(6, 4), nn.ReLU())
        model = nn.Sequential(backbone, nn.Linear(4, 3))
        opt = torch.optim.Adam(model[0].parameters(), lr=1e-3)
        model[1] = nn.Linear(4, 2)
        opt.add_param_group({"params": model[1].parameters()})
        for step in range(3):
            x, y = torch.randn(5, 6), torch.randint(0, 2, (5,))
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("model[1].weight", "model[1].bias"), story="the new head given to the optimizer as a param group"),
    stale("model-rebuilt-each-fold", """
        def make():
            return nn.Linear(4, 1)

        model = make()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for fold in range(2):
            model = make()
            for step in range(2):
                loss = model(torch.randn(8, 4)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    """, ("model.weight", "model.bias"),
        Finding(REPLACED, "warning", "model = make()", "opt = torch.optim.SGD(model.parameters(), lr=0.1)",
                line=7),
        twin="optimizer-made-each-fold", story="cross-validation: a fresh model per fold, one optimizer"),
    trains("optimizer-made-each-fold", "twin", """
        def make():
            return nn.Linear(4, 1)

        for fold in range(2):
            model = make()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(2):
                loss = model(torch.randn(8, 4)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    """, ("model.weight", "model.bias")),
    stale("leaf-rebound-after-optimizer", """
        w = torch.zeros(3, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.5)
        w = torch.randn(3, requires_grad=True)
        for step in range(3):
            loss = (w - 1).pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("w",),
        Finding(REPLACED, "warning", "w = torch.randn(3, requires_grad=True)",
                "opt = torch.optim.SGD([w], lr=0.5)"),
        story="a plain tensor parameter made again under its name"),
    stale("module-in-dict-replaced", """
        models = {"enc": nn.Linear(4, 3), "head": nn.Linear(3, 1)}
        opt = torch.optim.Adam([p for m in models.values() for p in m.parameters()], lr=1e-2)
        models["head"] = nn.Linear(3, 1)
        for step in range(3):
            loss = models["head"](models["enc"](torch.randn(5, 4))).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("models['head'].weight", "models['head'].bias"),
        Finding(REPLACED, "warning", 'models["head"] = nn.Linear(3, 1)', "opt = torch.optim.Adam("),
        story="a dict of modules, one of them made anew after the optimizer"),
    trains("model-moved-not-replaced", "lookalike", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model = model.to(torch.float32)
        model.load_state_dict(nn.Linear(4, 1).state_dict())
        for step in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("model.weight", "model.bias"), story=".to() and load_state_dict keep the same parameters"),
    runs("fresh-model-evaluated-after-training", "lookalike", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        baseline = model
        model = nn.Linear(4, 1)
        with torch.no_grad():
            gap = (baseline(torch.ones(1, 4)) - model(torch.ones(1, 4))).item()
    """, story="a fresh model for comparison, never trained: nothing to say"),

    # ---- running-average helpers: the cut goes where the value is handed in, and it is .item() only
    # where a number does everywhere the value goes ------------------------------------------------------
    leak("meter-running-sum", """
        class AverageMeter:
            def __init__(self):
                self.sum = 0
                self.count = 0
                self.avg = 0

            def update(self, val, n=1):
                self.sum += val * n
                self.count += n
                self.avg = self.sum / self.count

        model = nn.Linear(5, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        meter = AverageMeter()
        for step in range(4):
            loss = model(torch.randn(10, 5)).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            meter.update(loss, 10)
        print(f"{meter.avg:.4f}")
    """, "for step in range(4):",
        Finding(CHAIN, "warning", "meter.update(loss, 10)", "meter.update(loss.item(), 10)"),
        twin="meter-running-sum-item", story="the ImageNet example's AverageMeter, handed the loss itself"),
    quiet("meter-running-sum-item", "twin", """
        class AverageMeter:
            def __init__(self):
                self.sum = 0
                self.count = 0
                self.avg = 0

            def update(self, val, n=1):
                self.sum += val * n
                self.count += n
                self.avg = self.sum / self.count

        model = nn.Linear(5, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        meter = AverageMeter()
        for step in range(4):
            loss = model(torch.randn(10, 5)).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            meter.update(loss.item(), 10)
        print(f"{meter.avg:.4f}")
    """, Grows("for step in range(4):", False)),
    leak("meter-sum-read-as-tensor", """
        class Meter:
            def __init__(self):
                self.sum = 0
                self.count = 0

            def update(self, val, n=1):
                self.sum += val * n
                self.count += n

        model = nn.Linear(5, 1)
        meter = Meter()
        for step in range(4):
            loss = model(torch.randn(10, 5)).abs().mean()
            loss.backward()
            meter.update(loss, 10)
        print(meter.sum.item() / meter.count)
    """, "for step in range(4):",
        Finding(CHAIN, "warning", "meter.update(loss, 10)", "meter.update(loss.detach(), 10)"),
        story="the meter's sum is read with .item() later: a float there would fail"),
    leak("meter-list-stacked", """
        class Meter:
            def __init__(self):
                self.values = []

            def update(self, value):
                self.values.append(value)

            def mean(self):
                return torch.stack(self.values).mean()

        model = nn.Linear(5, 1)
        meter = Meter()
        for step in range(4):
            loss = model(torch.randn(10, 5)).abs().mean()
            loss.backward()
            meter.update(loss)
        print(meter.mean())
    """, "for step in range(4):",
        Finding(CONTAINER, "warning", "meter.update(loss)", "meter.update(loss.detach())"),
        story="torch.stack needs tensors: .item() would make it fail"),
    leak("smoothed-loss-helper", """
        def smooth(avg, x, beta=0.9):
            return beta * avg + (1 - beta) * x

        model = nn.Linear(5, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        avg = 0.0
        for step in range(4):
            loss = model(torch.randn(10, 5)).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            avg = smooth(avg, loss)
        print(f"{avg:.3f}")
    """, "for step in range(4):",
        Finding(CHAIN, "warning", "avg = smooth(avg, loss)", "avg = smooth(avg, loss.item())"),
        story="an exponential moving average helper"),
    leak("total-read-as-tensor", """
        total = 0
        model = nn.Linear(5, 1)
        for step in range(4):
            loss = model(torch.randn(10, 5)).abs().mean()
            loss.backward()
            total += loss
        print(total.item())
    """, "for step in range(4):",
        Finding(CHAIN, "warning", "total += loss", "total += loss.detach()"),
        story="total.item() after the loop: total += loss.item() would make it a float"),
    leak("losses-stacked-after-loop", """
        model = nn.Linear(5, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for step in range(4):
            loss = model(torch.randn(10, 5)).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss)
        print(torch.stack(losses).mean())
    """, "for step in range(4):",
        Finding(CONTAINER, "warning", "losses.append(loss)", "losses.append(loss.detach())"),
        story="torch.stack(losses) after the loop: a list of floats would make it fail"),
    leak("losses-averaged-with-math", """
        model = nn.Linear(5, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for step in range(4):
            loss = model(torch.randn(10, 5)).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss)
        print(math.fsum(losses) / len(losses))
    """, "for step in range(4):",
        Finding(CONTAINER, "warning", "losses.append(loss)", "losses.append(loss.item())"),
        story="math.fsum and len take floats: .item() is the cut"),
]
