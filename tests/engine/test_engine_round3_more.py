"""Round 3 (issue 24), continued: recurrent nets with in-place ``detach_`` and lists of states,
``input`` as a hook's parameter name, ``needs_input_grad``, weight surgery under ``no_grad``,
schedulers chained by hand, decoder layers, einsum attention, packed unsorted sequences, buffers
written in forward, hooks registered in loops, ``out=`` targets, ``backward(inputs=)``, generators,
dtype conversions of a model; each held to torch by ``assert_true_to_torch``.
"""

from __future__ import annotations

import pytest

from tests.engine.test_engine_real_code import assert_true_to_torch

RECURRENT_AND_HOOKS = {
    "detach_ in place on a carried hidden state": """
gru = nn.GRU(2, 3)
x = torch.randn(4, 1, 2)
h = torch.zeros(1, 1, 3)
for t in range(2):
    out, h = gru(x[2 * t:2 * t + 2], h)
    loss = out.pow(2).sum()
    loss.backward()
    h.detach_()
flag = h.requires_grad
y = torch.randn(3, requires_grad=True)
z = y * 2
z.detach_()
z.add_(1)
""",
    "rnn relu with outputs collected in a list then stacked": """
cell = nn.RNNCell(2, 3, nonlinearity="relu")
xs = torch.randn(4, 1, 2)
h = torch.zeros(1, 3)
outputs = []
for x_t in xs:
    h = cell(x_t, h)
    outputs.append(h)
seq = torch.stack(outputs)
loss = seq.sum()
loss.backward()
rnn = nn.RNN(2, 3, nonlinearity="relu", num_layers=2)
o, hn = rnn(xs)
""",
    "hooks named with input: forward hook storing activations, backward hook scaling grads": """
activations = {}
grads = {}
def save_act(name):
    def hook(module, input, output):
        activations[name] = output.detach()
    return hook
def scale(module, grad_input, grad_output):
    grads["out"] = grad_output[0]
    return (grad_input[0] * 0.5,)
net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
h1 = net[0].register_forward_hook(save_act("fc1"))
h2 = net[1].register_full_backward_hook(scale)
def pre(module, args, kwargs):
    return (args[0] * 2,), kwargs
h3 = net[2].register_forward_pre_hook(pre, with_kwargs=True)
input = torch.randn(2, 3, requires_grad=True)
out = net(input)
out.sum().backward()
a = activations["fc1"]
g = grads["out"]
h1.remove(); h2.remove(); h3.remove()
out2 = net(input)
""",
    "needs_input_grad and a Function of two inputs": """
class MulAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, c):
        ctx.save_for_backward(a, b)
        return a * b + c
    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = gb = gc = None
        if ctx.needs_input_grad[0]:
            ga = g * b
        if ctx.needs_input_grad[1]:
            gb = g * a
        if ctx.needs_input_grad[2]:
            gc = g
        return ga, gb, gc
a = torch.randn(3, requires_grad=True)
b = torch.randn(3)
c = torch.randn(3, requires_grad=True)
y = MulAdd.apply(a, b, c)
y.sum().backward()
with torch.no_grad():
    y2 = MulAdd.apply(a, b, c)
""",
    "a tensor hook registered in a loop with a closure, removed after": """
w = torch.randn(3, requires_grad=True)
handles = []
log = []
for i in range(3):
    handles.append(w.register_hook(lambda g, i=i: log.append((i, g.sum().item())) or g * (i + 1)))
loss = (w * w).sum()
loss.backward()
for hd in handles:
    hd.remove()
w.grad = None
(w * 2).sum().backward()
print(log)
""",
    "pack_padded_sequence unsorted, pad_packed_sequence, GRU classifier": """
from torch.nn.utils.rnn import pad_sequence, pack_padded_sequence, pad_packed_sequence
seqs = [torch.randn(3, 2), torch.randn(1, 2), torch.randn(2, 2)]
lengths = torch.tensor([3, 1, 2])
padded = pad_sequence(seqs, batch_first=True)
packed = pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
gru = nn.GRU(2, 3, batch_first=True)
out_p, h = gru(packed)
out, lens = pad_packed_sequence(out_p, batch_first=True)
logits = nn.Linear(3, 2)(h[-1])
loss = F.cross_entropy(logits, torch.tensor([0, 1, 1]))
loss.backward()
""",
}

MODELS_AND_WRITES = {
    "copy_, fill_ and weight surgery under no_grad, then training": """
net = nn.Linear(3, 2)
with torch.no_grad():
    net.weight.copy_(torch.eye(2, 3))
    net.bias.fill_(0.5)
    net.weight[0, 0] = 2.0
    net.weight.mul_(0.5)
x = torch.randn(4, 3)
loss = net(x).sum()
loss.backward()
net.weight.requires_grad = False
loss2 = net(x).sum()
loss2.backward()
vec = nn.utils.parameters_to_vector(net.parameters())
net.zero_grad()
gb = net.bias.grad
""",
    "lr set by hand in param_groups, scheduler with warmup SequentialLR": """
net = nn.Linear(2, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=2)
decay = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, decay], milestones=[2])
x = torch.randn(3, 2)
for epoch in range(4):
    loss = net(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    print(round(sched.get_last_lr()[0], 5))
for g in opt.param_groups:
    g["lr"] = 0.01
opt.step()
""",
    "transformer decoder layer norm_first with memory and masks": """
layer = nn.TransformerDecoderLayer(d_model=4, nhead=2, dim_feedforward=8, dropout=0.0, norm_first=True,
                                   batch_first=True)
tgt = torch.randn(1, 3, 4)
memory = torch.randn(1, 2, 4)
mask = nn.Transformer.generate_square_subsequent_mask(3)
out = layer(tgt, memory, tgt_mask=mask, tgt_is_causal=True)
loss = out.sum()
loss.backward()
enc = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, activation="gelu")
e = enc(torch.randn(3, 1, 4), src_key_padding_mask=torch.tensor([[False, False, True]]))
""",
    "einsum, bmm, baddbmm attention and a layer norm by hand": """
x = torch.randn(2, 3, 4, requires_grad=True)
wq = torch.randn(4, 4, requires_grad=True)
q = torch.einsum("bld,de->ble", x, wq)
s = torch.bmm(q, x.transpose(1, 2))
s2 = torch.baddbmm(torch.zeros(2, 3, 3), q, x.transpose(1, 2), alpha=0.5)
p = s.softmax(-1)
o = torch.einsum("bij,bjd->bid", p, x)
mu = o.mean(-1, keepdim=True)
var = o.var(-1, keepdim=True, unbiased=False)
ln = (o - mu) / torch.sqrt(var + 1e-5)
loss = ln.sum() + s2.sum()
loss.backward()
""",
    "a module's buffer registered and updated in forward, persistent False": """
class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))
        self.register_buffer("ema", torch.zeros(3), persistent=False)
        self.lin = nn.Linear(3, 3)
    def forward(self, x):
        self.count += 1
        with torch.no_grad():
            self.ema.mul_(0.9).add_(x.mean(0), alpha=0.1)
        return self.lin(x)
m = Counter()
x = torch.randn(2, 3)
for i in range(3):
    y = m(x)
y.sum().backward()
sd = m.state_dict()
c = sd["count"]
""",
    "out= arguments write, resize and return their target": """
a = torch.randn(2, 3)
b = torch.randn(3, 2)
c = torch.zeros(2, 2)
r = torch.mm(a, b, out=c)
s = torch.zeros(5)
torch.sum(a, 0, out=s)
v = torch.zeros(0)
i = torch.zeros(0, dtype=torch.long)
torch.max(a, 1, out=(v, i))
cat = torch.zeros(1)
torch.cat([a, a], dim=0, out=cat)
torch.add(a, 1, out=a)
torch.exp(b, out=b[:, 0])
""",
    "backward with inputs=, grad accumulated by hand, manual_seed mid-snippet, Generator": """
x = torch.randn(3, requires_grad=True)
y = torch.randn(3, requires_grad=True)
loss = (x * y).sum()
loss.backward(inputs=[x])
print(y.grad)
x.grad += 1
x.grad.mul_(2)
torch.manual_seed(3)
a = torch.randn(2)
g = torch.Generator().manual_seed(7)
b = torch.randn(2, generator=g)
c = torch.rand(2, generator=g)
idx = torch.randperm(4, generator=g)
""",
    "model dtype and device conversions, Embedding.from_pretrained, ParameterDict": """
net = nn.Linear(2, 2)
w_before = net.weight
net.to(torch.float64)
w_after = net.weight
net.half()
net.float()
net.to("cpu")
emb = nn.Embedding.from_pretrained(torch.randn(4, 2), freeze=True)
e = emb(torch.tensor([1, 3]))
pd = nn.ParameterDict({"a": nn.Parameter(torch.ones(2)), "b": nn.Parameter(torch.zeros(2))})
out = (pd["a"] * e).sum() + pd["b"].sum()
out.backward()
net.register_parameter("extra", nn.Parameter(torch.ones(1)))
x = net.extra
""",
}


@pytest.mark.parametrize("name", RECURRENT_AND_HOOKS)
def test_recurrent_and_hooks(name: str) -> None:
    assert_true_to_torch(RECURRENT_AND_HOOKS[name])


@pytest.mark.parametrize("name", MODELS_AND_WRITES)
def test_models_and_writes(name: str) -> None:
    assert_true_to_torch(MODELS_AND_WRITES[name])
