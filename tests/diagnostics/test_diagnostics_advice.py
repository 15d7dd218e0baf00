"""The advice is right on code learners write: each finding's fix, carried out, runs in plain torch
and cures what torch complained about, and code that is fine gets no finding.

Real engine traces; torch is the oracle: the snippet as written fails (or leaks) in plain torch, the
snippet with the finding's patch applied does not. Classes covered here:

* state carried across iterations (an RNN's hidden state, a module's ``self.h``, a running total)
  reached by backward() —
  "backward through the graph a second time" and, with ``retain_graph=True``, "modified by an
  inplace operation" after ``opt.step()``: the fix is the cut of what is carried (a tuple cut as a
  tuple, an unbound start guarded), never a ``.clone()`` nobody can write;
* a saved tensor overwritten by a module made with ``inplace=True``: the fix drops the keyword;
* a forward hook that stores its output: the fix detaches what it stores (wrapping the registration in
  ``no_grad`` does nothing);
* look-alikes: BatchNorm running stats, hidden state detached between batches, optimizer and
  scheduler state, GradScaler, evaluation under no_grad / inference_mode, ``loss.item()`` running sums.
"""

from __future__ import annotations

import gc

import pytest
import torch
from diagnostics_support import code_of, namespace, run

from app.diagnosis import apply


def _fails(code: str) -> str | None:
    """torch's error message for the code run plainly, or None when it runs."""
    try:
        namespace(code)
    except RuntimeError as error:
        return str(error)
    return None


def _patched(r, rule: str) -> str:  # noqa: ANN001
    d = r.only(rule)
    assert d.patch, f"{rule} offers no code: {d.fix}"
    return apply(r.code, d.patch)


# ---- state carried across iterations -------------------------------------------------------------

RNN_LOOPS = {
    # name: (snippet, the carried name, the cut its fix must write)
    "lstm-tuple": ("""
        rnn = nn.LSTM(4, 8, batch_first=True)
        opt = torch.optim.SGD(rnn.parameters(), lr=0.1)
        h = (torch.zeros(1, 2, 8), torch.zeros(1, 2, 8))
        for i in range(3):
            x = torch.randn(2, 5, 4)
            out, h = rnn(x, h)
            loss = out.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, "h = tuple(s.detach() for s in h)"),
    "gru-tensor": ("""
        rnn = nn.GRU(4, 8)
        opt = torch.optim.SGD(rnn.parameters(), lr=0.1)
        h = torch.zeros(1, 2, 8)
        for i in range(3):
            out, h = rnn(torch.randn(3, 2, 4), h)
            loss = out.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, "h = h.detach()"),
    "lstm-none-start": ("""
        rnn = nn.LSTM(4, 8)
        opt = torch.optim.Adam(rnn.parameters(), lr=1e-3)
        state = None
        for i in range(3):
            out, state = rnn(torch.randn(3, 2, 4), state)
            loss = out.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, "state = tuple(s.detach() for s in state)"),
    "cell-while": ("""
        cell = nn.GRUCell(4, 6)
        opt = torch.optim.SGD(cell.parameters(), lr=0.1)
        hx = torch.zeros(2, 6)
        i = 0
        while i < 3:
            hx = cell(torch.randn(2, 4), hx)
            opt.zero_grad()
            hx.pow(2).mean().backward()
            opt.step()
            i += 1
    """, "hx = hx.detach()"),
    "module-attribute": ("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(4, 8)
                self.hh = nn.Linear(8, 8)
                self.h = torch.zeros(1, 8)
            def forward(self, x):
                self.h = torch.tanh(self.lin(x) + self.hh(self.h))
                return self.h
        net = Net()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for i in range(3):
            loss = net(torch.randn(1, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """, "net.h = net.h.detach()"),
}


@pytest.mark.parametrize("name", RNN_LOOPS)
def test_backward_twice_through_carried_state_is_cut_as_what_it_holds(name: str) -> None:
    source, cut = RNN_LOOPS[name]
    code = code_of(source)
    assert "backward through the graph a second time" in (_fails(code) or "")  # torch: it fails
    r = run(source)
    d = r.only("backward-twice")
    assert f"`{cut}`" in d.fix
    fixed = _patched(r, "backward-twice")
    assert cut in fixed
    assert _fails(fixed) is None  # torch: the fix runs


@pytest.mark.parametrize("name", RNN_LOOPS)
def test_retain_graph_over_carried_state_then_a_step_is_cut_not_cloned(name: str) -> None:
    """The learner's next attempt: ``retain_graph=True``. Then opt.step() changes a weight the old
    iteration's graph saved and backward() fails on it; "clone it" is no fix for an optimizer step."""
    source, cut = RNN_LOOPS[name]
    code = code_of(source).replace(".backward()", ".backward(retain_graph=True)")
    assert "modified by an inplace operation" in (_fails(code) or "")
    r = run(code)
    d = r.only("saved-tensor-modified")
    assert d.severity == "error"
    assert ".clone()" not in d.fix and f"`{cut}`" in d.fix
    assert "earlier iteration" in d.message
    fixed = _patched(r, "saved-tensor-modified")
    assert _fails(fixed) is None


def test_a_weight_saved_as_a_view_is_named_by_its_weight() -> None:
    """A GRU's ``AddmmBackward0`` saves ``weight.t()``: the finding names the parameter behind it."""
    source, _cut = RNN_LOOPS["gru-tensor"]
    r = run(code_of(source).replace(".backward()", ".backward(retain_graph=True)"))
    d = r.only("saved-tensor-modified")
    assert "saved as `mat2`" not in d.title and "`rnn.weight_" in d.title


def test_two_losses_of_one_graph_around_a_step_are_told_to_run_the_forward_again() -> None:
    """No loop carries anything: the second loss's graph is the one opt.step() made stale."""
    source = """
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        out = model(torch.randn(3, 4))
        out.pow(2).mean().backward(retain_graph=True)
        opt.step()
        out.abs().mean().backward()
    """
    assert "modified by an inplace operation" in (_fails(code_of(source)) or "")
    r = run(source)
    d = r.only("saved-tensor-modified")
    assert ".clone()" not in d.fix and "compute the forward pass again" in d.fix


# ---- a module made with inplace=True -------------------------------------------------------------

INPLACE_MODULES = {
    "relu-after-sigmoid": """
        model = nn.Sequential(nn.Linear(4, 4), nn.Sigmoid(), nn.ReLU(inplace=True), nn.Linear(4, 1))
        loss = model(torch.randn(3, 4)).sum()
        loss.backward()
    """,
    "functional-after-tanh": """
        lin = nn.Linear(4, 4)
        x = torch.randn(3, 4)
        h = F.leaky_relu(torch.tanh(lin(x)), 0.1, inplace=True)
        h.sum().backward()
    """,
    "hardtanh-after-exp-in-a-class": """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)
                self.act = nn.Hardtanh(inplace=True)
            def forward(self, x):
                return self.act(self.fc(x).exp())
        net = Net()
        net(torch.randn(2, 4)).sum().backward()
    """,
}


@pytest.mark.parametrize("name", INPLACE_MODULES)
def test_a_saved_tensor_overwritten_by_an_inplace_module_drops_the_keyword(name: str) -> None:
    source = INPLACE_MODULES[name]
    assert "modified by an inplace operation" in (_fails(code_of(source)) or "")
    r = run(source)
    d = r.only("saved-tensor-modified")
    assert "inplace=True" in d.fix and ".clone()" not in d.fix
    fixed = _patched(r, "saved-tensor-modified")
    assert "inplace=True" not in fixed
    assert _fails(fixed) is None


def test_an_inplace_module_the_failing_line_does_not_run_is_not_blamed() -> None:
    """A helper writes the saved tensor; an unrelated ``nn.ReLU(inplace=True)`` sits elsewhere: torch
    fails the same without that keyword, so dropping it is no fix."""
    source = """
        def scale(t):
            t.mul_(2)
            return t
        conv = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(inplace=True))
        x = torch.randn(3, requires_grad=True)
        y = x.exp()
        z = scale(y)
        z.sum().backward()
    """
    code = code_of(source)
    assert "modified by an inplace operation" in (_fails(code.replace("inplace=True", "")) or "")
    r = run(source)
    d = r.only("saved-tensor-modified")
    assert "inplace=True" not in d.fix and all(p.start != 4 for p in d.patch)


def test_an_inplace_relu_after_a_conv_is_fine() -> None:
    r = run("""
        model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(inplace=True), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(2, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(2):
            loss = model(torch.randn(2, 1, 4, 4)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """)
    assert r.rules == []


# ---- a hook that stores what it is handed --------------------------------------------------------

def _live_nodes(ns: dict) -> int:
    """Autograd nodes reachable from every tensor the namespace's lists hold (torch's own graph)."""
    seen: set[int] = set()
    stack = [t.grad_fn for v in ns.values() if isinstance(v, list) for t in v
             if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(fn for fn, _ in node.next_functions if fn is not None)
    return len(seen)


HOOKS = {
    "lambda": """
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
        feats = []
        model[1].register_forward_hook(lambda m, i, o: feats.append(o))
        for i in range(3):
            out = model(torch.randn(2, 4))
    """,
    "def": """
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
        feats = []
        def keep(module, input, output):
            feats.append(output)
        model[0].register_forward_hook(keep)
        for i in range(3):
            out = model(torch.randn(2, 4))
    """,
}


@pytest.mark.parametrize("name", HOOKS)
def test_a_hook_that_stores_its_output_is_told_to_detach_it(name: str) -> None:
    source = HOOKS[name]
    assert _live_nodes(namespace(code_of(source))) > 0  # torch: the stored outputs keep graphs
    r = run(source)
    d = r.only("graph-kept-by-container")
    fixed = _patched(r, "graph-kept-by-container")
    assert ".detach()" in fixed and "no_grad" not in fixed
    gc.collect()
    assert _live_nodes(namespace(fixed)) == 0  # torch: the fix keeps no graph
    assert d.severity == "warning"


# ---- real training code that is fine -------------------------------------------------------------

FINE = {
    "cnn-bn-dropout-loader-sched-eval": """
        from torch.utils.data import DataLoader, TensorDataset
        X = torch.randn(32, 1, 6, 6)
        Y = torch.randint(0, 3, (32,))
        loader = DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True)
        model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.2),
                              nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        running_loss = 0.0
        for epoch in range(2):
            model.train()
            for xb, yb in loader:
                opt.zero_grad()
                loss = F.cross_entropy(model(xb), yb)
                loss.backward()
                opt.step()
                running_loss += loss.item()
            sched.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for xb, yb in loader:
                correct += (model(xb).argmax(1) == yb).sum().item()
    """,
    "lstm-repackaged": """
        def repackage_hidden(h):
            if isinstance(h, torch.Tensor):
                return h.detach()
            return tuple(repackage_hidden(v) for v in h)
        rnn = nn.LSTM(4, 8)
        opt = torch.optim.SGD(rnn.parameters(), lr=0.1)
        hidden = (torch.zeros(1, 2, 8), torch.zeros(1, 2, 8))
        for i in range(3):
            hidden = repackage_hidden(hidden)
            out, hidden = rnn(torch.randn(3, 2, 4), hidden)
            loss = out.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """,
    "gradscaler-autocast-adamw-onecycle": """
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=3)
        scaler = torch.amp.GradScaler("cpu")
        for i in range(3):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(4, 8)).float().pow(2).mean()
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            sched.step()
    """,
    "inference-mode-with-batchnorm": """
        model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
        model.eval()
        preds = []
        with torch.inference_mode():
            for i in range(3):
                preds.append(model(torch.randn(4, 8)))
    """,
    "gru-eval-carried-under-no-grad": """
        rnn = nn.GRU(4, 8)
        h = torch.zeros(1, 2, 8)
        with torch.no_grad():
            for i in range(4):
                out, h = rnn(torch.randn(3, 2, 4), h)
    """,
    "gan-detached-fake": """
        G = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 4))
        D = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
        optG = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.999))
        optD = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.5, 0.999))
        crit = nn.BCEWithLogitsLoss()
        for i in range(2):
            fake = G(torch.randn(6, 2))
            optD.zero_grad()
            lossD = crit(D(torch.randn(6, 4)), torch.ones(6, 1)) + crit(D(fake.detach()), torch.zeros(6, 1))
            lossD.backward()
            optD.step()
            optG.zero_grad()
            lossG = crit(D(fake), torch.ones(6, 1))
            lossG.backward()
            optG.step()
    """,
    "frozen-backbone-in-the-optimizer": """
        backbone = nn.Linear(8, 8)
        head = nn.Linear(8, 2)
        model = nn.Sequential(backbone, nn.ReLU(), head)
        for p in backbone.parameters():
            p.requires_grad = False
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(3):
            loss = model(torch.randn(4, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """,
    "embedding-max-norm": """
        emb = nn.Embedding(10, 4, max_norm=1.0)
        lin = nn.Linear(4, 1)
        opt = torch.optim.SGD(list(emb.parameters()) + list(lin.parameters()), lr=0.5)
        for i in range(3):
            loss = lin(emb(torch.randint(0, 10, (6,)))).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """,
    "article-input-clone": """
        model = nn.Linear(8, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(3):
            x = torch.randn(4, 8)
            x = x.clone()
            x[:, 0] = 0
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """,
}


@pytest.mark.parametrize("name", FINE)
def test_real_training_code_that_is_fine_gets_no_warning(name: str) -> None:
    code = code_of(FINE[name])
    assert _fails(code) is None
    r = run(code)
    assert r.result.error is None
    assert [d.rule for d in r.diagnostics if d.severity != "info"] == []
