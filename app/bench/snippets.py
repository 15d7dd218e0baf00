"""The scenarios issues 9, 13 and 24 set targets for, shared by the benchmarks (and tests) that use them."""

from __future__ import annotations

# The six-line snippet of issue 2, the small request (``app.bench.http``).
CLONE_DETACH = """\
x = torch.ones(3, requires_grad=True)
y = x.clone()
z = x.detach()
w = x.clone().detach()
v = x.detach().clone()
z.add_(1)
"""

# A loop that appends a 16-element loss tensor, graph and all, to a list: the leak the explorer exists
# to show (issue 9), at ``n`` = 100 and 1,000 iterations. ``{op}``: ``sin``, which saves its input.
LEAK_OF = """\
w = torch.randn(16, requires_grad=True)
x = torch.randn(16)
losses = []
for i in range({n}):
    loss = (w * x * i).{op}()
    losses.append(loss)
"""
LEAK = LEAK_OF.replace("{op}", "sin")

# Ops that save their own output for backward, as most networks' activations do (issue 24 §6): torch
# hands that saved tensor out as a fresh object at every access. ``{x}`` is the op's input.
SAVES_OUTPUT = {
    "relu": "{x}.relu()",
    "nn.ReLU": "nn.ReLU()({x})",
    "sigmoid": "torch.sigmoid({x})",
    "tanh": "{x}.tanh()",
    "exp": "{x}.exp()",
    "softmax": "F.softmax({x}, dim=0)",
    "log_softmax": "{x}.log_softmax(0)",
    "sqrt": "({x} * {x} + 1).sqrt()",
    "reciprocal": "({x} * {x} + 1).reciprocal()",
    "tanh into mul": "({x}.tanh() * a)",  # a network's activation, then Linear
}

# Where a loop keeps what it made: (before the loop, in the loop).
KEPT_IN = {
    "list": ("kept = []", "kept.append(out)"),
    "dict": ("kept = {}", "kept[i] = out"),
    "attribute": ("class History:\n    pass\nhistory = History()\nhistory.kept = []",
                  "history.kept.append(out)"),
    "list of tuples": ("kept = []", "kept.append((out, i))"),  # history.append((loss, acc))
    "list of dicts": ("kept = []", "kept.append({'loss': out, 'step': i})"),
    "set": ("kept = set()", "kept.add(out)"),
    "set of tuples": ("kept = set()", "kept.add((out, i))"),
    "frozenset": ("kept = frozenset()", "kept = kept | {out}"),  # a new frozenset at each iteration
    "frozenset of tuples": ("kept = frozenset()", "kept = kept | {(out, i)}"),
    "tuple": ("kept = ()", "kept = kept + (out,)"),  # a new tuple at each iteration
    "deque": ("from collections import deque\nkept = deque()", "kept.append(out)"),
}


def kept_graphs(op: str, n: int, keep: str = "list", loop: str = "for", backward: bool = False) -> str:
    """A loop that keeps ``n`` graphs of ``SAVES_OUTPUT[op]`` (each one's output reduced to a scalar,
    its backward run first when ``backward``) in a ``KEPT_IN[keep]``, written as a ``for`` or a
    ``while`` loop."""
    before, keeping = KEPT_IN[keep]
    body = [f"out = {SAVES_OUTPUT[op].format(x='(a * i)')}.mean()"]
    if backward:
        body.append("out.backward(retain_graph=True)")
    body.append(keeping)
    head = f"a = torch.randn(16, requires_grad=True)\n{before}\n"
    if loop == "for":
        return head + f"for i in range({n}):\n" + "".join(f"    {line}\n" for line in body)
    return head + f"i = 0\nwhile i < {n}:\n" + "".join(f"    {line}\n" for line in [*body, "i += 1"])

# A 100-epoch Adam loop on a small MLP that appends its loss tensor (issue 9).
ADAM = """\
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
x, y = torch.randn(32, 4), torch.randn(32, 1)
losses = []
for epoch in range(100):
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss)
"""

# A small CNN trained on 20 batches of 16 through a DataLoader (issue 24 §7): convolution, batch norm
# (whose running statistics torch writes without a version bump), pooling, SGD with momentum. (Not
# ``CNN`` below, issue 27's picture: one name for both made the engine bench time that one.)
BATCHNORM_CNN = """\
from torch.utils.data import DataLoader, TensorDataset
images, labels = torch.randn(320, 1, 8, 8), torch.randint(0, 3, (320,))
loader = DataLoader(TensorDataset(images, labels), batch_size=16, shuffle=True)
model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
total = 0.0
for xb, yb in loader:
    opt.zero_grad()
    loss = F.cross_entropy(model(xb), yb)
    loss.backward()
    opt.step()
    total += loss.item()
"""

# A ~400-node graph, then its backward pass (issue 13: the pass adds at most 100 ms); ``{last}`` is
# ``loss.backward()``, or ``pass`` for the same run without it.
DEEP_BACKWARD = """\
w = torch.randn(8, requires_grad=True)
h = w
for i in range(200):
    h = (h * 1.01).sin()
loss = h.sum()
{last}
"""

# Predictions kept as numpy arrays (``.numpy()`` shares each tensor's memory): every named array is
# checked at every step (numpy may write it), the engine's one per-array cost.
NUMPY_KEPT = """\
import numpy as np
preds = []
for i in range({n}):
    out = torch.randn(4)
    preds.append(out.numpy())
"""

# Issue 27: real code at model size, as a new user would paste it. A small CNN trained 3 epochs × 5
# batches through a DataLoader.
CNN = """\
from torch.utils.data import DataLoader, TensorDataset

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        x = self.pool(F.relu(self.conv(x)))
        return self.fc(x.flatten(1))

data = TensorDataset(torch.randn(20, 1, 8, 8), torch.randint(0, 3, (20,)))
loader = DataLoader(data, batch_size=4)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for epoch in range(3):
    for xb, yb in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
"""

# An LSTM that carries its hidden state from one chunk of a sequence to the next (detached).
LSTM = """\
lstm = nn.LSTM(input_size=4, hidden_size=8)
head = nn.Linear(8, 1)
opt = torch.optim.Adam([*lstm.parameters(), *head.parameters()], lr=0.01)
seq = torch.randn(20, 1, 4)
state = None
for t in range(0, 20, 5):
    out, state = lstm(seq[t:t + 5], state)
    loss = head(out[-1]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    state = tuple(s.detach() for s in state)
"""

# One TransformerEncoderLayer trained a few steps with Adam.
TRANSFORMER = """\
layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
opt = torch.optim.Adam(layer.parameters(), lr=1e-3)
x = torch.randn(2, 5, 16)
for step in range(3):
    out = layer(x)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

# A loop that never ends, each iteration slow enough that the wall limit (5 s), not the step limit,
# cuts it.
FOREVER = """\
x = torch.randn(200, 200)
while True:
    x = torch.tanh(x @ x)
"""
