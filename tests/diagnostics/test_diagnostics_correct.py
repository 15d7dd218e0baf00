"""Correct programs get no diagnostic at all: training loops, manual updates, gradient penalty,
freezing, inference, truncated BPTT, gradient accumulation, EMA weights, init under no_grad, ...
(A deliberate ``x.detach().requires_grad_()`` gets an informative note; the gallery covers it.)"""

from __future__ import annotations

import pytest
from diagnostics_support import run

CORRECT = {
    "clone-mod": """\
x = torch.randn(3, requires_grad=True)
y = x.clone()
y.add_(1)
loss = (y * y).sum()
loss.backward()
print(x.grad)
""",
    "detach-clone": """\
x = torch.randn(3, requires_grad=True)
snap = x.detach().clone()
with torch.no_grad():
    x.mul_(2)
print(snap, x)
""",
    "freeze": """\
model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
for p in model[0].parameters():
    p.requires_grad_(False)
x = torch.randn(3, 4)
loss = model(x).sum()
loss.backward()
print(model[1].weight.grad, model[0].weight.grad)
""",
    "funcs": """\
def step(w, x):
    y = (w * x).sum()
    y.backward()
    return y.item()

w = torch.randn(3, requires_grad=True)
vals = []
for i in range(3):
    vals.append(step(w, torch.randn(3)))
    with torch.no_grad():
        w.sub_(0.1 * w.grad)
        w.grad = None
""",
    "infer": """\
model = nn.Linear(3, 2)
x = torch.randn(4, 3)
with torch.no_grad():
    out = model(x)
preds = []
for i in range(3):
    with torch.no_grad():
        preds.append(model(x[i]))
with torch.inference_mode():
    o2 = model(x)
print(out.requires_grad, o2.is_inference())
""",
    "manual": """\
w = torch.randn(3, requires_grad=True)
x = torch.randn(3)
for i in range(3):
    loss = ((w * x).sum() - 1) ** 2
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
    w.grad.zero_()
    w.data.add_(0.0)
""",
    "penalty": """\
x = torch.randn(5, 3, requires_grad=True)
model = nn.Linear(3, 1)
out = model(x).sum()
g, = torch.autograd.grad(out, x, create_graph=True)
penalty = (g.norm(dim=1) - 1).pow(2).mean()
penalty.backward()
print(model.weight.grad)
""",
    "retain": """\
x = torch.randn(3, requires_grad=True)
y = x * 2
y.retain_grad()
z = (y ** 2).sum()
z.backward()
print(y.grad, x.grad)
""",
    "rnn": """\
W = torch.randn(4, 4, requires_grad=True)
h = torch.zeros(4)
outs = []
for t in range(4):
    h = torch.tanh(W @ h + 1)
    outs.append(h)
loss = torch.stack(outs).sum()
loss.backward()
print(W.grad.shape)
""",
    "train": """\
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 4)
y = torch.randn(16, 1)
losses = []
for step in range(5):
    opt.zero_grad()
    pred = model(x)
    loss = F.mse_loss(pred, y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
print(losses[-1])
""",
    "views": """\
a = torch.arange(12.).reshape(3, 4)
t = a.t()
s = a[:, 1]
e = a[0].expand(3, 4)
s.mul_(10)
r = t.reshape(12)
print(a, t.is_contiguous())
""",
    "accum": """\
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
opt.zero_grad()
for micro in range(3):
    x = torch.randn(4, 3)
    loss = model(x).pow(2).mean() / 3
    loss.backward()
opt.step()
correct = 0
for i in range(3):
    x = torch.randn(4, 3)
    with torch.no_grad():
        pred = model(x)
    correct += (pred > 0).sum().item()
print(correct)
""",
    "ema": """\
model = nn.Linear(4, 2)
ema = [p.detach().clone() for p in model.parameters()]
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(3):
    x = torch.randn(5, 4)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        for e, p in zip(ema, model.parameters()):
            e.mul_(0.9).add_(p.detach(), alpha=0.1)
""",
    "features": """\
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
feats = []
for i in range(3):
    out = model(torch.randn(2, 4))
    feats.append(out.detach())
target = out.detach()
loss = F.mse_loss(model(torch.randn(2, 4)), target)
loss.backward()
print(len(feats))
""",
    "init": """\
w = torch.empty(3, 3, requires_grad=True)
nn.init.xavier_uniform_(w)
b = torch.zeros(3, requires_grad=True)
with torch.no_grad():
    b.fill_(0.1)
x = torch.randn(2, 3)
out = (x @ w + b).relu()
out.sum().backward()
print(w.grad, b.grad)
lin = nn.Linear(3, 3)
with torch.no_grad():
    lin.weight.copy_(w)
lin.bias.data.zero_()
""",
    "reqgrad-plain": """\
x = torch.randn(3)
x.requires_grad_()
y = (x ** 2).sum()
g, = torch.autograd.grad(y, x)
print(g, x.grad)
""",
    "seed-clone": """\
x = torch.randn(100, 64)
w = torch.randn(64, 10, requires_grad=True)
for epoch in range(3):
    x = x.clone()
    x[:, 0] = 0.0
    loss = (x @ w).pow(2).mean()
    loss.backward()
    w.grad = None
""",
    "tbptt": """\
W = torch.randn(3, 3, requires_grad=True)
h = torch.zeros(3)
for t in range(4):
    h = h.detach()
    h = torch.tanh(W @ h + 1)
    loss = h.sum()
    loss.backward()
    with torch.no_grad():
        W -= 0.01 * W.grad
        W.grad.zero_()
""",
}


@pytest.mark.parametrize("name", CORRECT)
def test_correct_program_gets_no_diagnostic(name: str) -> None:
    r = run(CORRECT[name])
    assert r.result.ok and not r.result.truncated
    assert r.diagnostics == [], [d.title for d in r.diagnostics]
