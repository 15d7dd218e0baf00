"""The scenarios issues 9 and 13 set targets for, shared by the benchmarks that measure them."""

from __future__ import annotations

# A loop that appends a 16-element loss tensor, graph and all, to a list: the leak the explorer exists
# to show (issue 9), at ``n`` = 100 and 1,000 iterations.
LEAK = """\
w = torch.randn(16, requires_grad=True)
x = torch.randn(16)
losses = []
for i in range({n}):
    loss = (w * x * i).sin()
    losses.append(loss)
"""

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
