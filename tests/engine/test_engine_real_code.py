"""The code learners and practitioners write (issue 24): recurrent nets with carried hidden state,
attention, custom autograd Functions, checkpointing, torch.func, hooks, autocast. Each snippet runs
plainly and under the engine: every forward step must say what torch says at that moment
(``assert_steps_match_plain``), the run must end as the plain run ends — same output, same error,
same final tensors and graphs (``assert_same_as_plain``) — and incremental snapshots must equal whole
ones."""

from __future__ import annotations

import pytest
from torch_oracle import assert_same_as_plain, assert_steps_match_plain

from tests.engine.test_engine_incremental import _assert_same

# Recurrent nets: nn.GRU / nn.GRUCell save copies (MulBackward0's self) whose CloneBackward0 no
# ``next`` edge reaches; such a node is still what the copy's grad_fn is, and is shown.
RECURRENT = {
    "gru forward and backward": """
gru = nn.GRU(3, 2)
x = torch.randn(3, 2, 3)
out, h = gru(x)
loss = out.sum()
loss.backward()
""",
    "gru cell loop": """
cell = nn.GRUCell(3, 2)
x = torch.randn(3, 2, 3)
h = torch.zeros(2, 2)
for t in range(3):
    h = cell(x[t], h)
loss = h.pow(2).sum()
loss.backward()
""",
    "gru with carried hidden state, trained": """
gru = nn.GRU(2, 2, batch_first=True, bidirectional=True)
head = nn.Linear(4, 1)
opt = torch.optim.SGD(list(gru.parameters()) + list(head.parameters()), lr=0.1)
x = torch.randn(1, 2, 2)
h = None
for step in range(2):
    out, h = gru(x, h)
    h = h.detach()
    loss = head(out[:, -1]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    "lstm with carried hidden state, Adam": """
lstm = nn.LSTM(2, 3, batch_first=True)
head = nn.Linear(3, 1)
opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=0.01)
x = torch.randn(1, 3, 2)
h = None
for step in range(2):
    out, h = lstm(x, h)
    h = (h[0].detach(), h[1].detach())
    loss = head(out[:, -1]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    "lstm cell and a packed sequence": """
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
cell = nn.LSTMCell(2, 3)
hx, cx = torch.zeros(1, 3), torch.zeros(1, 3)
for t in range(2):
    hx, cx = cell(torch.randn(1, 2), (hx, cx))
lstm = nn.LSTM(2, 2, batch_first=True)
packed = pack_padded_sequence(torch.randn(2, 3, 2), torch.tensor([3, 1]), batch_first=True)
out, (h, c) = lstm(packed)
padded, lengths = pad_packed_sequence(out, batch_first=True)
(padded.sum() + hx.sum()).backward()
""",
    "rnn tanh, two layers": """
rnn = nn.RNN(2, 3, num_layers=2)
x = torch.randn(4, 1, 2)
h0 = torch.zeros(2, 1, 3)
out, hn = rnn(x, h0)
out.mean().backward()
""",
}


def _check(source: str) -> None:
    source = source.strip("\n") + "\n"
    assert_steps_match_plain(source)
    assert_same_as_plain(source)
    _assert_same(source)


@pytest.mark.parametrize("name", RECURRENT)
def test_recurrent_nets(name: str) -> None:
    _check(RECURRENT[name])
