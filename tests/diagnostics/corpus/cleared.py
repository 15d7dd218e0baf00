"""Gradients cleared between ``backward()`` and the step (``cases.py`` adds them to ``CASES``): the
zero_grad() a line too late. Each labelled as in ``cases.py`` and checked in plain torch by
``oracle.py`` (``Cleared``: at the step line, after a backward, every ``.grad`` is None or zeros, and
a step over None gradients leaves the parameters as they were); the right placements, a GAN and
accumulation every k batches must stay quiet.
"""

from __future__ import annotations

from tests.diagnostics.corpus.cases import Case, Cleared, Finding, _code

CLEARED_RULE = "grads-cleared-before-step"


def lost(name: str, code: str, params: tuple[str, ...], at: str, *findings: Finding,
         twin: str | None = None, story: str = "") -> Case:
    return Case(name, "cleared", _code(code), Cleared(params, at), tuple(findings), twin, story)


def kept(name: str, kind: str, code: str, params: tuple[str, ...], at: str, story: str = "") -> Case:
    return Case(name, kind, _code(code), Cleared(params, at, False), (), None, story)


CLEARED: list[Case] = [
    lost("zero-grad-between-backward-and-step", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            opt.zero_grad()
            opt.step()
    """, ("model.weight", "model.bias"), "opt.step()",
        Finding(CLEARED_RULE, "warning", "opt.zero_grad()", "loss.backward()"),
        twin="zero-grad-before-backward", story="zero_grad() one line too late: the step finds no .grad"),
    kept("zero-grad-before-backward", "twin", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, ("model.weight", "model.bias"), "opt.step()"),
    lost("zero-grad-keeping-zeros-before-step", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            opt.zero_grad(set_to_none=False)
            opt.step()
    """, ("model.weight", "model.bias"), "opt.step()",
        Finding(CLEARED_RULE, "warning", "opt.zero_grad(set_to_none=False)", "loss.backward()"),
        story="zeros, not None: plain SGD steps by nothing"),
    lost("zero-grad-before-adam-step", """
        net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
        for epoch in range(3):
            out = net(torch.randn(8, 4))
            loss = F.mse_loss(out, torch.zeros(8, 1))
            loss.backward()
            optimizer.zero_grad(set_to_none=False)
            optimizer.step()
    """, ("net[0].weight", "net[2].bias"), "optimizer.step()",
        Finding(CLEARED_RULE, "warning", "optimizer.zero_grad(set_to_none=False)", "loss.backward()"),
        story="Adam over zeros still moves by its moments, never by this batch"),
    lost("model-zero-grad-in-while", """
        net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        i = 0
        while i < 4:
            loss = net(torch.randn(8, 4)).abs().mean()
            loss.backward()
            net.zero_grad()
            opt.step()
            i += 1
    """, ("net[0].weight", "net[2].weight"), "opt.step()",
        Finding(CLEARED_RULE, "warning", "net.zero_grad()", "loss.backward()"),
        story="model.zero_grad() in a while loop, SGD with momentum"),
    lost("grads-set-to-none-by-hand", """
        model = nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            loss = F.cross_entropy(model(torch.randn(6, 3)), torch.randint(0, 2, (6,)))
            loss.backward()
            for p in model.parameters():
                p.grad = None
            opt.step()
    """, ("model.weight", "model.bias"), "opt.step()",
        Finding(CLEARED_RULE, "warning", "for p in model.parameters():", "loss.backward()"),
        story="p.grad = None by hand, one block too early"),
    lost("grads-zeroed-in-place-by-hand", """
        w = torch.randn(3, requires_grad=True)
        b = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([w, b], lr=0.1)
        for step in range(4):
            loss = ((torch.randn(5, 3) @ w + b) ** 2).mean()
            loss.backward()
            w.grad.zero_()
            b.grad.zero_()
            opt.step()
    """, ("w", "b"), "opt.step()",
        Finding(CLEARED_RULE, "warning", "w.grad.zero_()", "opt.step()"),
        story="p.grad.zero_() by hand between backward and step"),
    lost("zero-grad-before-step-in-helper", """
        model = nn.Linear(3, 2)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)

        def train_step(x, y):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.zero_grad()
            opt.step()
            return loss.item()

        for epoch in range(3):
            train_step(torch.randn(6, 3), torch.randint(0, 2, (6,)))
    """, ("model.weight", "model.bias"), "opt.step()",
        Finding(CLEARED_RULE, "warning", "opt.zero_grad()", "loss.backward()"),
        story="the step in a helper the loop calls"),
    kept("zero-grad-after-step", "twin", """
        model = nn.Linear(3, 2)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        for epoch in range(3):
            loss = F.cross_entropy(model(torch.randn(6, 3)), torch.randint(0, 2, (6,)))
            loss.backward()
            opt.step()
            opt.zero_grad()
    """, ("model.weight", "model.bias"), "opt.step()",
        story="cleared after the step: the next backward starts clean"),
    kept("gan-discriminator-cleared-before-generator", "lookalike", """
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
            D.zero_grad()
            g_opt.zero_grad()
            g_loss = -D(G(z)).mean()
            g_loss.backward()
            g_opt.step()
    """, ("D.weight", "D.bias"), "d_opt.step()",
        story="D's gradients cleared before the generator's backward, which adds into them unused"),
    lost("accumulate-every-two-cleared-before-step", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(6):
            loss = model(torch.randn(8, 4)).pow(2).mean() / 2
            loss.backward()
            if (i + 1) % 2 == 0:
                opt.zero_grad()
                opt.step()
    """, ("model.weight", "model.bias"), "opt.step()",
        Finding(CLEARED_RULE, "warning", "opt.zero_grad()", "opt.step()"),
        story="accumulation every k batches with the two calls swapped: the fix goes after the step"),
    lost("zero-grad-before-step-in-trainer", """
        class Trainer:
            def __init__(self, model):
                self.model = model
                self.opt = torch.optim.SGD(model.parameters(), lr=0.1)

            def fit(self, n):
                for _ in range(n):
                    loss = self.model(torch.randn(4, 3)).pow(2).mean()
                    loss.backward()
                    self.opt.zero_grad()
                    self.opt.step()

        t = Trainer(nn.Linear(3, 1))
        t.fit(3)
    """, ("t.model.weight", "t.model.bias"), "self.opt.step()",
        Finding(CLEARED_RULE, "warning", "self.opt.zero_grad()", "loss.backward()"),
        story="the optimizer an attribute of a trainer object"),
    kept("accumulate-every-two-zeroed-after-step", "lookalike", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(6):
            loss = model(torch.randn(8, 4)).pow(2).mean() / 2
            loss.backward()
            if (i + 1) % 2 == 0:
                opt.step()
                opt.zero_grad()
    """, ("model.weight", "model.bias"), "opt.step()",
        story="gradient accumulation on purpose: the zero_grad() follows the step"),
    # cleared inside ``with torch.no_grad():`` (or another ``with``): the patch moves the block, or
    # takes the clear out of it, never out of a loop
    lost("grads-set-to-none-under-no-grad", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.grad = None
            opt.step()
    """, ("model.weight", "model.bias"), "opt.step()",
        Finding(CLEARED_RULE, "warning", "with torch.no_grad():", "loss.backward()"),
        story="p.grad = None under no_grad, between backward and step"),
    lost("zero-grad-under-no-grad", """
        net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
        for step in range(3):
            loss = F.mse_loss(net(torch.randn(8, 4)), torch.zeros(8, 1))
            loss.backward()
            with torch.no_grad():
                opt.zero_grad()
            opt.step()
    """, ("net[0].weight", "net[2].bias"), "opt.step()",
        Finding(CLEARED_RULE, "warning", "with torch.no_grad():", "loss.backward()"),
        story="zero_grad() wrapped in no_grad, Adam"),
    lost("zero-grad-under-set-grad-enabled-false", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            with torch.set_grad_enabled(mode=False):
                model.weight.grad = None
                model.bias.grad = None
            opt.step()
    """, ("model.weight", "model.bias"), "opt.step()",
        Finding(CLEARED_RULE, "warning", "with torch.set_grad_enabled(mode=False):", "loss.backward()"),
        story="two clears in a set_grad_enabled(False) block"),
    lost("grads-zeroed-under-no-grad-beside-a-log", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        norms = []
        for step in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                norms.append(model.weight.grad.norm().item())
                for p in model.parameters():
                    p.grad.zero_()
            opt.step()
    """, ("model.weight", "model.bias"), "opt.step()",
        Finding(CLEARED_RULE, "warning", "for p in model.parameters():", "opt.step()"),
        story="the no_grad block also logs: only the clear leaves it, for after the step"),
    lost("hand-update-zeroed-first-under-no-grad", """
        w = torch.randn(4, 1, requires_grad=True)
        for step in range(4):
            loss = (torch.randn(8, 4) @ w).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                w.grad.zero_()
                w -= 0.1 * w.grad
    """, ("w",), "w -= 0.1 * w.grad",
        Finding(CLEARED_RULE, "warning", "w.grad.zero_()", "w -= 0.1 * w.grad"),
        story="an update by hand that zeroes the gradient before it uses it"),
    lost("hand-update-loop-zeroed-first-under-no-grad", """
        params = [torch.randn(4, 1, requires_grad=True), torch.randn(1, requires_grad=True)]
        for step in range(4):
            loss = (torch.randn(8, 4) @ params[0] + params[1]).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p.grad.zero_()
                    p -= 0.1 * p.grad
    """, ("params[0]",), "p -= 0.1 * p.grad",  # (the first visit updates params[0], by zeros)
        Finding(CLEARED_RULE, "warning", "p.grad.zero_()", "p -= 0.1 * p.grad"),
        story="the same in a loop over the parameters: the clear moves within the loop"),
    kept("hand-update-loop-zeroed-after-under-no-grad", "twin", """
        params = [torch.randn(4, 1, requires_grad=True), torch.randn(1, requires_grad=True)]
        for step in range(4):
            loss = (torch.randn(8, 4) @ params[0] + params[1]).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p -= 0.1 * p.grad
                    p.grad.zero_()
    """, ("params[0]",), "p -= 0.1 * p.grad"),
    kept("grads-set-to-none-under-no-grad-after-step", "twin", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            opt.step()
            with torch.no_grad():
                for p in model.parameters():
                    p.grad = None
    """, ("model.weight", "model.bias"), "opt.step()"),
    # cleared by a helper of the snippet's, called between backward and step: its call moves
    lost("no-grad-helper-clears-between-backward-and-step", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        @torch.no_grad()
        def clear(m):
            for p in m.parameters():
                p.grad = None

        for step in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            clear(model)
            opt.step()
    """, ("model.weight", "model.bias"), "opt.step()",
        Finding(CLEARED_RULE, "warning", "clear(model)", "loss.backward()"),
        story="a @torch.no_grad() helper that sets every .grad to None, called a line too early"),
    lost("helper-zeroes-between-backward-and-step", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def zero_grads(m):
            \"\"\"Zero the gradients in place.\"\"\"
            for p in m.parameters():
                p.grad.zero_()

        for step in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            zero_grads(model)
            opt.step()
    """, ("model.weight", "model.bias"), "opt.step()",
        Finding(CLEARED_RULE, "warning", "zero_grads(model)", "opt.step()"),
        story="a helper that zeroes in place: its call moves after the step (None at first)"),
    kept("helper-zeroes-after-step", "twin", """
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def zero_grads(m):
            \"\"\"Zero the gradients in place.\"\"\"
            for p in m.parameters():
                p.grad.zero_()

        for step in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            opt.step()
            zero_grads(model)
    """, ("model.weight", "model.bias"), "opt.step()"),
]
