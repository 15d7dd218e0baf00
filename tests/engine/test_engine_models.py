"""Model training as learners write it (issue 24), each snippet checked three ways against torch:
every forward step says what torch says at that moment (``assert_steps_match_plain``), the run ends
as a plain run ends (``assert_same_as_plain``), and incremental snapshots equal whole ones
(``_assert_same``).

Found wrong here, and fixed:

* a saved slot torch refuses as "modified by an inplace operation ... is at version 2" kept that
  message when the tensor was written again (torch: "version 3"): the node was no longer filed
  under the storage it saved from, so later writes did not read it again (BatchNorm's running stats
  reset twice under a kept graph, a sigmoid's output written by an in-place ReLU then by the
  snippet, Adam writing a weight a kept graph saved);
* a node marked for reading again but two nodes under what the step read (its parent's tensor
  rebound to a newer node) was not found, and silently not read: now it is found through the
  step's reads, and a member the step cannot find while it stays in R makes the step whole;
* after ``w.data = ...`` (``model.double()`` does it to every parameter) or ``x.set_(y)``, the
  tensor and its old aliases (``d = w.detach()`` before) share a version counter on two storages:
  a write through one moved the other's version, and the incremental step, reading only the
  tensors on the written storage, kept the old one.
"""

from __future__ import annotations

import pytest
from torch_oracle import assert_same_as_plain, assert_steps_match_plain

from tests.engine.test_engine_incremental import _assert_same

CNN = {
    "CNN with batch norm and dropout through a DataLoader, Adam, train and eval": """
from torch.utils.data import TensorDataset, DataLoader
xs = torch.randn(12, 1, 6, 6)
ys = torch.randint(0, 3, (12,))
loader = DataLoader(TensorDataset(xs, ys), batch_size=4, shuffle=True)
model = nn.Sequential(
    nn.Conv2d(1, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(), nn.MaxPool2d(2),
    nn.Dropout(0.25), nn.Flatten(), nn.Linear(27, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
criterion = nn.CrossEntropyLoss()
for epoch in range(2):
    model.train()
    running = 0.0
    for xb, yb in loader:
        opt.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        opt.step()
        running += loss.item()
    model.eval()
    with torch.no_grad():
        acc = (model(xs).argmax(1) == ys).float().mean()
print(round(running, 3), model[1].num_batches_tracked)
""",
    "BatchNorm1d in an MLP, inference_mode evaluation, Dropout2d": """
model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Dropout(0.5), nn.Linear(6, 2))
drop2 = nn.Dropout2d(0.5)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
x = torch.randn(8, 4)
y = torch.randint(0, 2, (8,))
for step in range(3):
    out = model(x)
    loss = F.cross_entropy(out, y)
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()
model.eval()
with torch.inference_mode():
    pred = model(x)
    probs = pred.softmax(dim=1)
fm = drop2(torch.ones(2, 3, 2, 2))
stats = model[1].running_mean.clone()
""",
    "functional batch norm with momentum, and BatchNorm2d without affine nor running stats": """
bn = nn.BatchNorm2d(2, affine=False, track_running_stats=False)
bn2 = nn.BatchNorm2d(2, momentum=0.5)
x = torch.randn(3, 2, 2, 2, requires_grad=True)
y = bn(x)
z = bn2(x)
w = bn2(x + 1)
bn2.eval()
e = bn2(x)
(y.sum() + z.pow(2).sum() + e.sum()).backward()
""",
}

RECURRENT = {
    "LSTM language model: hidden state carried, detached between batches": """
class LM(nn.Module):
    def __init__(self, vocab, hid):
        super().__init__()
        self.emb = nn.Embedding(vocab, hid)
        self.rnn = nn.LSTM(hid, hid, num_layers=2, dropout=0.2)
        self.out = nn.Linear(hid, vocab)
    def forward(self, x, hidden):
        o, hidden = self.rnn(self.emb(x), hidden)
        return self.out(o), hidden
    def init_hidden(self, bsz):
        w = next(self.parameters())
        return (w.new_zeros(2, bsz, 4), w.new_zeros(2, bsz, 4))
model = LM(6, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
data = torch.randint(0, 6, (7, 2))
hidden = model.init_hidden(2)
for i in range(0, 6, 3):
    inp, target = data[i:i+3], data[i+1:i+4]
    hidden = tuple(h.detach() for h in hidden)
    model.zero_grad()
    output, hidden = model(inp, hidden)
    loss = F.cross_entropy(output.view(-1, 6), target.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.5)
""",
    "GRU cell and LSTM cell unrolled by hand": """
gru = nn.GRUCell(3, 2)
lstm = nn.LSTMCell(3, 2)
x = torch.randn(4, 1, 3)
h = torch.zeros(1, 2)
hc = (torch.zeros(1, 2), torch.zeros(1, 2))
outs = []
for t in range(4):
    h = gru(x[t], h)
    hc = lstm(x[t], hc)
    outs.append(h + hc[0])
loss = torch.stack(outs).sum()
loss.backward()
""",
    "RNN tanh and GRU layers, bidirectional, batch_first": """
rnn = nn.RNN(3, 2, batch_first=True, bidirectional=True)
gru = nn.GRU(4, 2, num_layers=2, batch_first=True)
x = torch.randn(2, 3, 3)
out, h = rnn(x)
out2, h2 = gru(out)
out2[:, -1].sum().backward()
with torch.no_grad():
    o3, h3 = gru(out, h2)
""",
    "packed sequences through an LSTM": """
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
seqs = [torch.randn(3, 2), torch.randn(2, 2), torch.randn(1, 2)]
lengths = torch.tensor([3, 2, 1])
padded = pad_sequence(seqs, batch_first=True)
lstm = nn.LSTM(2, 3, batch_first=True)
packed = pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=True)
out, (h, c) = lstm(packed)
unpacked, lens = pad_packed_sequence(out, batch_first=True)
loss = unpacked.sum() + h.sum()
loss.backward()
""",
}

ATTENTION = {
    "MultiheadAttention self-attention with a causal mask, weights averaged and not": """
mha = nn.MultiheadAttention(embed_dim=4, num_heads=2, batch_first=True)
x = torch.randn(2, 3, 4, requires_grad=True)
mask = torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1)
out, weights = mha(x, x, x, attn_mask=mask)
out2, w2 = mha(x, x, x, need_weights=True, average_attn_weights=False)
(out.sum() + out2.sum()).backward()
mha.eval()
with torch.no_grad():
    o3, _ = mha(x, x, x, need_weights=False)
""",
    "TransformerEncoder layers, trained a step with AdamW": """
layer = nn.TransformerEncoderLayer(d_model=4, nhead=2, dim_feedforward=8, dropout=0.1, batch_first=True)
enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
opt = torch.optim.AdamW(enc.parameters(), lr=1e-3, weight_decay=0.01)
src = torch.randn(2, 3, 4)
pad = torch.tensor([[False, False, True], [False, False, False]])
out = enc(src, src_key_padding_mask=pad)
loss = out.pow(2).mean()
loss.backward()
opt.step()
enc.eval()
with torch.no_grad():
    ev = enc(src)
""",
    "hand-written scaled dot-product attention and F.scaled_dot_product_attention": """
q = torch.randn(1, 2, 3, 4, requires_grad=True)
k = torch.randn(1, 2, 3, 4)
v = torch.randn(1, 2, 3, 4)
scores = q @ k.transpose(-2, -1) / math.sqrt(4)
scores = scores.masked_fill(torch.triu(torch.ones(3, 3), 1).bool(), float('-inf'))
attn = scores.softmax(dim=-1)
out = attn @ v
out2 = F.scaled_dot_product_attention(q, k, v, is_causal=True)
(out - out2).abs().sum().backward()
""",
    "nn.Transformer with a square subsequent mask": """
model = nn.Transformer(d_model=4, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                       dim_feedforward=8, dropout=0.0, batch_first=True)
src = torch.randn(1, 3, 4)
tgt = torch.randn(1, 2, 4)
mask = nn.Transformer.generate_square_subsequent_mask(2)
out = model(src, tgt, tgt_mask=mask)
out.sum().backward()
""",
}

EMBEDDINGS = {
    "embeddings: max_norm functional and module, weight tying, EmbeddingBag": """
emb = nn.Embedding(6, 3, max_norm=0.5, norm_type=2.0)
w = emb.weight
out = emb(torch.tensor([[1, 2], [2, 5]]))
e = F.embedding(torch.tensor([0, 3]), w, max_norm=0.1)
head = nn.Linear(3, 6, bias=False)
head.weight = emb.weight
logits = head(out)
loss = logits.sum()
loss.backward()
bag = nn.EmbeddingBag(5, 2, mode='mean')
b = bag(torch.tensor([0, 1, 2, 3]), torch.tensor([0, 2]))
""",
}

OPTIMIZERS = {
    "Adam foreach and not, AdamW amsgrad, RMSprop, Adagrad with weight decay": """
def make():
    return nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
x, y = torch.randn(4, 2), torch.randn(4, 1)
models = [make() for _ in range(5)]
opts = [
    torch.optim.Adam(models[0].parameters(), lr=0.01, foreach=True),
    torch.optim.Adam(models[1].parameters(), lr=0.01, foreach=False, weight_decay=0.1),
    torch.optim.AdamW(models[2].parameters(), lr=0.01, amsgrad=True),
    torch.optim.RMSprop(models[3].parameters(), lr=0.01, momentum=0.5, centered=True),
    torch.optim.Adagrad(models[4].parameters(), lr=0.1, weight_decay=0.01),
]
for it in range(2):
    for m, o in zip(models, opts):
        o.zero_grad()
        F.mse_loss(m(x), y).backward()
        o.step()
""",
    "fused Adam and SGD on the CPU": """
m = nn.Linear(3, 2)
m2 = nn.Linear(3, 2)
o1 = torch.optim.Adam(m.parameters(), lr=0.1, fused=True)
o2 = torch.optim.SGD(m2.parameters(), lr=0.1, momentum=0.9, fused=True)
x = torch.randn(2, 3)
for i in range(2):
    for mod, opt in ((m, o1), (m2, o2)):
        opt.zero_grad()
        mod(x).pow(2).sum().backward()
        opt.step()
""",
    "param groups with their own learning rates, clip_grad_value_, grad norm read": """
model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))
opt = torch.optim.SGD([
    {'params': model[0].parameters(), 'lr': 0.01},
    {'params': model[2].parameters()}], lr=0.1, momentum=0.9)
x = torch.randn(5, 3)
for i in range(2):
    opt.zero_grad()
    loss = model(x).abs().mean()
    loss.backward()
    nn.utils.clip_grad_value_(model.parameters(), 0.1)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0, norm_type=2)
    opt.step()
print(opt.param_groups[0]['lr'], norm)
""",
}

SCHEDULERS = {
    "StepLR, OneCycleLR, CosineAnnealingLR, ReduceLROnPlateau, LambdaLR": """
from torch.optim.lr_scheduler import StepLR, OneCycleLR, CosineAnnealingLR, ReduceLROnPlateau, LambdaLR
w = nn.Parameter(torch.randn(3))
opts = [torch.optim.SGD([w], lr=0.1) for _ in range(5)]
scheds = [StepLR(opts[0], step_size=2, gamma=0.5), OneCycleLR(opts[1], max_lr=0.5, total_steps=5),
          CosineAnnealingLR(opts[2], T_max=4), ReduceLROnPlateau(opts[3], patience=0),
          LambdaLR(opts[4], lambda e: 0.9 ** e)]
for epoch in range(4):
    for o in opts:
        o.zero_grad()
        loss = (w ** 2).sum()
        loss.backward()
        o.step()
    for i, s in enumerate(scheds):
        if i == 3:
            s.step(loss.item())
        else:
            s.step()
print([round(o.param_groups[0]['lr'], 5) for o in opts])
""",
}

AMP = {
    "GradScaler on the CPU with autocast bfloat16": """
model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
x = torch.randn(3, 4)
for i in range(2):
    opt.zero_grad()
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        out = model(x)
        loss = out.float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
print(scaler.get_scale())
""",
}

STATE = {
    "state_dict, load_state_dict, deepcopy, an EMA copy updated under no_grad": """
import copy
model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
ema = copy.deepcopy(model)
opt = torch.optim.Adam(model.parameters(), lr=0.1)
x = torch.randn(4, 2)
model(x).sum().backward()
opt.step()
with torch.no_grad():
    for pe, pm in zip(ema.parameters(), model.parameters()):
        pe.mul_(0.9).add_(pm, alpha=0.1)
sd = model.state_dict()
saved = {k: v.clone() for k, v in sd.items()}
model2 = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
model2.load_state_dict(sd)
opt2 = torch.optim.Adam(model2.parameters(), lr=0.1)
opt2.load_state_dict(opt.state_dict())
best = copy.deepcopy(model.state_dict())
model.load_state_dict(best)
""",
}


STALE_SAVES = {
    "bn reset twice with a kept graph": """
model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
x = torch.randn(5, 3)
kept = []
kept.append(model(x).sum())
model[1].reset_running_stats()
y = model(x)
model[1].reset_running_stats()
z = 1
""",
    "sigmoid then inplace relu in a Sequential, then more writes": """
model = nn.Sequential(nn.Linear(2, 2), nn.Sigmoid(), nn.ReLU(inplace=True))
out = model(torch.randn(1, 2))
out.add_(1)
out.mul_(2)
""",
    "saved input written twice": """
x = torch.ones(3, requires_grad=True)
y = x * 1
z = y.sin()
y.add_(1)
y.add_(1)
w = y[0:2]
w.mul_(3)
""",
    "losses kept while SGD steps the weights they saved": """
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 3)
losses = []
for i in range(3):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward(retain_graph=True)
    opt.step()
    losses.append(loss)
""",
    "custom Function's saved input written twice": """
class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x
    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x * g
a = torch.ones(3, requires_grad=True)
b = a * 1
c = Square.apply(b)
b.add_(1)
with torch.no_grad():
    b.mul_(2)
""",
    "a kept graph over a weight written by Adam twice, and a tanh output written through a view": """
w = nn.Parameter(torch.randn(3))
opt = torch.optim.Adam([w], lr=0.1)
kept = (w * 2).exp()
t = torch.tanh(w)
for i in range(2):
    opt.zero_grad()
    (w ** 2).sum().backward()
    opt.step()
v = t.detach()[1:]
v.add_(1)
v.add_(1)
""",
}


SHARED_COUNTERS = {
    "a weight's detached snapshot, then w.data replaced and written under no_grad": """
lin = nn.Linear(3, 3)
acts = {}
acts['w'] = lin.weight.detach()
w = lin.weight
w.data = w.data * 0.5
with torch.no_grad():
    lin.weight[0].fill_(0.5)
""",
    "a detached copy's write moves the moved tensor's version": """
w = torch.ones(3, requires_grad=True)
d = w.detach()
w.data = torch.zeros(3)
d.add_(1)
with torch.no_grad():
    w.mul_(2)
v = d[1:]
v.sub_(1)
""",
    "set_ moves a tensor to another's memory with its counter": """
x = torch.ones(4)
alias = x[:2]
y = torch.zeros(4)
x.set_(y)
x.add_(1)
alias.mul_(3)
y.add_(5)
""",
    "a model converted by .double() under an old snapshot, then trained": """
m = nn.Linear(2, 1)
snap = m.weight.detach()
m.double()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
m(torch.ones(1, 2, dtype=torch.float64)).sum().backward()
opt.step()
snap.add_(1)
""",
}


def _check(source: str) -> None:
    source = source.strip("\n") + "\n"
    assert_steps_match_plain(source)
    assert_same_as_plain(source)
    _assert_same(source)


ALL = CNN | RECURRENT | ATTENTION | EMBEDDINGS | OPTIMIZERS | SCHEDULERS | AMP | STATE


@pytest.mark.parametrize("name", ALL)
def test_model_training(name: str) -> None:
    _check(ALL[name])


@pytest.mark.parametrize("name", STALE_SAVES)
def test_a_saved_slot_refused_as_modified_follows_later_writes(name: str) -> None:
    """torch's "modified by an inplace operation" names the saved tensor's version now: each later
    write to it changes what the node says, also where the node is two nodes under what the step
    read again (``out.add_(1)`` then ``out.mul_(2)``: the ReLU that saved ``out``)."""
    _check(STALE_SAVES[name])


@pytest.mark.parametrize("name", SHARED_COUNTERS)
def test_a_version_counter_shared_across_storages(name: str) -> None:
    """``w.data = ...`` and ``set_`` give a tensor new memory and keep its version counter, which
    its old aliases share: a write through one moves the other's version, on memory it did not
    touch."""
    _check(SHARED_COUNTERS[name])
