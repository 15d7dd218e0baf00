"""The code learners and practitioners write (issue 24): recurrent nets with carried hidden state,
attention, custom autograd Functions, checkpointing, torch.func, hooks, autocast. Each snippet runs
plainly and under the engine: every forward step must say what torch says at that moment
(``assert_steps_match_plain``), the run must end as the plain run ends — same output, same error,
same final tensors and graphs (``assert_same_as_plain``) — and incremental snapshots must equal whole
ones."""

from __future__ import annotations

import pytest
from torch_oracle import CHECKPOINT_SLOT, assert_same_as_plain, assert_steps_match_plain, trace

from app.engine import trace_delta
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
    "two-layer GRU, a bias-free GRUCell loop, then eval": """
gru = nn.GRU(3, 4, num_layers=2, batch_first=True)
x = torch.randn(2, 5, 3, requires_grad=True)
out, h = gru(x)
cell = nn.GRUCell(3, 4, bias=False)
hc = torch.zeros(2, 4)
outs = []
for t in range(3):
    hc = cell(x[:, t], hc)
    outs.append(hc)
loss = out.sum() + torch.stack(outs).pow(2).sum()
loss.backward()
gru.eval()
with torch.no_grad():
    o2, h2 = gru(x)
""",
    "GRU with dropout between layers, LSTM with projections": """
gru = nn.GRU(2, 3, num_layers=2, dropout=0.5)
out, h = gru(torch.randn(4, 1, 2))
lstm = nn.LSTM(2, 4, proj_size=2)
o2, (h2, c2) = lstm(torch.randn(3, 1, 2))
(out.sum() + o2.sum()).backward()
""",
}


# Checkpointing: what a non-reentrant checkpoint saves is a holder its unpack hook recomputes from —
# reading it for a step would recompute, and torch then refuses the backward's own unpack; a
# reentrant checkpoint runs the forward again inside backward, as snippet lines of the pass.
CHECKPOINT = {
    "non-reentrant checkpoint then backward": """
from torch.utils.checkpoint import checkpoint
lin = nn.Linear(3, 3)
def f(x):
    h = torch.relu(lin(x))
    return F.dropout(h, 0.5).sin()
x = torch.randn(2, 3, requires_grad=True)
y = checkpoint(f, x, use_reentrant=False)
loss = y.sum()
loss.backward()
""",
    "reentrant checkpoint then backward": """
from torch.utils.checkpoint import checkpoint
lin = nn.Linear(3, 3)
def f(x):
    return torch.relu(lin(x)).sin()
x = torch.randn(2, 3, requires_grad=True)
y = checkpoint(f, x, use_reentrant=True)
loss = y.sum()
loss.backward()
""",
    "nested non-reentrant checkpoints with keywords, graph retained": """
from torch.utils.checkpoint import checkpoint
block = nn.Sequential(nn.Linear(3, 3), nn.GELU(), nn.Linear(3, 3), nn.Tanh())
opt = torch.optim.SGD(block.parameters(), lr=0.1)
def inner(t):
    return checkpoint(lambda u: u.sigmoid() * u, t, use_reentrant=False)
def outer(t, scale=1.0):
    return inner(block(t)) * scale
x = torch.randn(2, 3, requires_grad=True)
for i in range(2):
    y = checkpoint(outer, x, scale=2.0, use_reentrant=False, preserve_rng_state=False)
    loss = y.pow(2).sum()
    opt.zero_grad()
    loss.backward(retain_graph=True)
    opt.step()
g = x.grad
""",
    "checkpointed blocks in a training loop": """
from torch.utils.checkpoint import checkpoint, checkpoint_sequential
blocks = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 2), nn.ReLU())
opt = torch.optim.SGD(blocks.parameters(), lr=0.1)
x = torch.randn(2, 2)
for step in range(2):
    opt.zero_grad()
    out = checkpoint_sequential(blocks, 2, x, use_reentrant=False)
    loss = checkpoint(lambda t: t.pow(2).mean(), out, use_reentrant=False)
    loss.backward()
    opt.step()
""",
    "a checkpointed block with batch norm: its running stats move again in the recompute": """
from torch.utils.checkpoint import checkpoint
net = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.ReLU())
x = torch.randn(4, 2, requires_grad=True)
y = checkpoint(net, x, use_reentrant=False)
m1 = net[1].running_mean.clone()
y.sum().backward()
m2 = net[1].running_mean
""",
}


# Custom autograd Functions: Function.apply attaches the graph to what forward returned, in C++, after
# forward's own lines (which may have read that very tensor under a local name) have run.
CUSTOM_FUNCTIONS = {
    "forward binds its output to a local": """
class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x * 2
        return out
    @staticmethod
    def backward(ctx, g):
        return g * 2
x = torch.ones(3, requires_grad=True)
y = Double.apply(x)
z = y * 3
z.sum().backward()
""",
    "outputs from sort, non-differentiable, setup_context, identity and a view": """
from torch.autograd.function import once_differentiable
class SortFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        values, idx = x.sort()
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        return values, idx
    @staticmethod
    @once_differentiable
    def backward(ctx, g, _):
        (idx,) = ctx.saved_tensors
        out = torch.zeros_like(g)
        out.scatter_(0, idx, g)
        return out
class Exp(torch.autograd.Function):
    @staticmethod
    def forward(x):
        result = x.exp()
        return result
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
    @staticmethod
    def backward(ctx, g):
        (result,) = ctx.saved_tensors
        return g * result
class Ident(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x
    @staticmethod
    def backward(ctx, g):
        return g
class ViewFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        v = x.view(-1)
        return v
    @staticmethod
    def backward(ctx, g):
        return g.view(2, 2)
x = torch.tensor([3.0, 1.0, 2.0], requires_grad=True)
vals, order = SortFn.apply(x)
e = Exp.apply(vals)
i = Ident.apply(e)
m = torch.ones(2, 2, requires_grad=True)
flat = ViewFn.apply(m * 1)
loss = i.sum() + flat.sum()
loss.backward()
""",
    "a Function inside a module, trained": """
class ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        y = x.clone()
        return y
    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)
    def forward(self, x):
        h = ScaleGrad.apply(x, 0.5)
        return self.fc(h)
net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(3, 2, requires_grad=True)
for i in range(2):
    opt.zero_grad()
    out = net(x)
    out.sum().backward()
    opt.step()
""",
    "tuples of locals, mark_dirty, a Function inside a helper": """
class Two(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        a = x.exp()
        b = x * 3
        ctx.save_for_backward(a)
        return a, b
    @staticmethod
    def backward(ctx, ga, gb):
        (a,) = ctx.saved_tensors
        return ga * a + gb * 3
class AddOne(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.add_(1)
        ctx.mark_dirty(x)
        return x
    @staticmethod
    def backward(ctx, g):
        return g
x = torch.randn(3, requires_grad=True)
a, b = Two.apply(x)
c = a.clone()
d = AddOne.apply(c)
def use(t):
    r, s = Two.apply(t)
    return r + s
u = use(x)
(d.sum() + b.sum() + u.sum()).backward()
""",
    "grads not materialised, an output kept in a class-level list": """
class NoMat(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.set_materialize_grads(False)
        ctx.k = k
        out = x * k
        return out, k
    @staticmethod
    def backward(ctx, g, _):
        return (None if g is None else g * ctx.k), None
class Cached(torch.autograd.Function):
    cache = []
    @staticmethod
    def forward(ctx, x):
        out = x.tanh()
        Cached.cache.append(out)
        ctx.save_for_backward(out)
        return out
    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * (1 - out * out)
x = torch.randn(3, requires_grad=True)
ys = [NoMat.apply(x, k)[0] for k in (1.0, 2.0)]
c = Cached.apply(x)
kept = Cached.cache[0]
(sum(y.sum() for y in ys) + c.sum()).backward()
""",
    "module hooks that replace inputs and outputs": """
lin = nn.Linear(3, 2)
def hook(module, input, output):
    doubled = output * 2
    return doubled
h = lin.register_forward_hook(hook)
pre = lin.register_forward_pre_hook(lambda m, inp: (inp[0] + 1,))
y = lin(torch.randn(4, 3))
y.sum().backward()
""",
    "a forward hook with kwargs and a full backward hook": """
lin = nn.Linear(3, 2)
def fwd(module, args, kwargs, output):
    return output.relu()
lin.register_forward_hook(fwd, with_kwargs=True)
grads = []
lin.register_full_backward_hook(lambda m, gi, go: grads.append(go[0]))
x = torch.randn(4, 3, requires_grad=True)
y = lin(x)
y.sum().backward()
g0 = grads[0]
""",
}


# Warnings and printed output point at the snippet, as a plain run's do: the engine's own frames around
# a torch call (its mode, torch's handle_torch_function) must not shift what ``stacklevel`` counts.
WARNINGS = {
    "softmax without dim, at the top, in a function and in a module": """
x = torch.randn(2, 3)
y = F.softmax(x)
z = F.log_softmax(x)
def f(t):
    return F.softmin(t)
w = f(x)
s = nn.Softmax()(x)
class Net(nn.Module):
    def forward(self, t):
        return F.softmax(t)
n = Net()(x)
print(y.sum(dim=1))
""",
    "warnings from C++, from Python, and the snippet's own": """
import warnings
a = torch.randn(2, 3, requires_grad=True)
b = a * 2
g = b.grad
d = F.dropout2d(torch.randn(2, 3, 4))
u = F.upsample(torch.randn(1, 1, 2), scale_factor=2)
def old(t):
    warnings.warn("old() is going away", DeprecationWarning, stacklevel=2)
    return t
warnings.simplefilter("always")
k = old(a)
k = old(a)
print(torch.ones(2))
""",
    "softmax in a Sequential, a comprehension and a lambda; deprecations; stacklevel 3": """
import warnings
x = torch.randn(2, 3)
sm = nn.Sequential(nn.Linear(3, 3), nn.Softmax())
a = sm(x)
b = [F.log_softmax(r) for r in x.unsqueeze(0)]
c = (lambda t: F.softmax(t))(x)
s = F.sigmoid(x)
t = F.tanh(x)
r = torch.range(0, 2)
def deep(t):
    warnings.warn("deep one", UserWarning, stacklevel=3)
    return t
def mid(t):
    return deep(t)
m = mid(x)
print(a.shape)
""",
    "copy-constructed tensors, meshgrid, broadcasting mse_loss, softmax in a module": """
a = torch.randn(2, 3)
b = torch.tensor(a)
gx, gy = torch.meshgrid(torch.arange(2), torch.arange(3))
l = F.mse_loss(torch.randn(3, 1), torch.randn(3))
class M(nn.Module):
    def forward(self, t):
        return F.softmax(t) * torch.tensor(t)
o = M()(a)
print(l.shape)
""",
}


# torch.func: inside a transform, tensors are wrappers whose facts depend on the transform's level at
# the moment of reading (an AccumulateGrad's variable is another wrapper of the same leaf at each
# level; a vmap's batched tensor has no numbers of its own).
TORCH_FUNC = {
    "nested grad": """
from torch.func import grad
def f(x):
    return torch.sin(x)
x = torch.tensor(1.0)
d2 = grad(grad(f))(x)
print(d2)
""",
    "per-sample gradients, jacobians, hessian, vjp, jvp": """
from torch.func import functional_call, vmap, grad, jacrev, jacfwd, hessian, vjp, jvp
model = nn.Linear(3, 1)
params = {k: v.detach() for k, v in model.named_parameters()}
def loss_fn(params, x, y):
    out = functional_call(model, params, (x.unsqueeze(0),))
    return F.mse_loss(out, y.unsqueeze(0))
x = torch.randn(4, 3)
y = torch.randn(4, 1)
per_sample = vmap(grad(loss_fn), in_dims=(None, 0, 0))(params, x, y)
def f(t):
    return (t.sin() * t).sum()
v = torch.tensor([0.5, 1.0])
J = jacrev(torch.sin)(v)
Jf = jacfwd(torch.sin)(v)
H = hessian(f)(v)
out, pullback = vjp(torch.sin, v)
(g,) = pullback(torch.ones(2))
o2, t2 = jvp(torch.sin, (v,), (torch.ones(2),))
val, aux = grad(lambda t: (f(t), t.cos()), has_aux=True)(v)
""",
    "triple grad, jacfwd(jacrev), jacrev(jacrev), vmap of nested grad": """
from torch.func import grad, jacrev, jacfwd, vmap
def f(x):
    return (x.sin() * x.exp()).sum()
x = torch.tensor([0.3, 0.7])
d3 = grad(lambda t: grad(lambda u: grad(lambda v: (v ** 4).sum())(u).sum())(t).sum())(x)
H = jacfwd(jacrev(f))(x)
H2 = jacrev(jacrev(f))(x)
hv = vmap(grad(grad(torch.sin)))(x)
print(d3, H.shape, hv)
""",
}


# Attention: in eval mode without grad, nn.MultiheadAttention and the Transformer layers take a fused
# fast path unless torch.overrides.has_torch_function says a mode is on: the engine's must not count.
ATTENTION = {
    "multi-head attention and transformer layers in eval, fast path": """
mha = nn.MultiheadAttention(4, 2, batch_first=True)
mha.eval()
q = torch.randn(2, 3, 4)
with torch.no_grad():
    out, w = mha(q, q, q)
    out2, w2 = mha(q, q, q, need_weights=False)
mask = torch.tensor([[False, False, True], [False, False, False]])
with torch.inference_mode():
    out3, _ = mha(q, q, q, key_padding_mask=mask)
layer = nn.TransformerEncoderLayer(4, 2, dim_feedforward=8, batch_first=True)
enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
enc.eval()
with torch.no_grad():
    h = enc(q)
dec = nn.TransformerDecoderLayer(4, 2, dim_feedforward=8, batch_first=True)
dec.eval()
with torch.no_grad():
    d = dec(q, h)
print(h.shape, d.shape)
""",
    "multi-head self-attention with a causal mask, backward": """
mha = nn.MultiheadAttention(4, 2, batch_first=True)
x = torch.randn(1, 3, 4, requires_grad=True)
causal = torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1)
out, weights = mha(x, x, x, attn_mask=causal)
out.sum().backward()
""",
    "scaled dot-product attention, layer norm, dropout, group norm of a leaf no name holds": """
q = torch.randn(1, 2, 3, 4, requires_grad=True)
o = F.scaled_dot_product_attention(q, q, q, is_causal=True)
ln = nn.LayerNorm(4)
h = ln(o)
d = F.dropout(h, 0.3, training=True)
gn = nn.GroupNorm(2, 2)
k = gn(torch.randn(1, 2, 3, requires_grad=True))
(d.sum() + k.sum()).backward()
""",
}


def assert_true_to_torch(source: str) -> None:
    """What every real-code case is held to: each step shows what torch says at that point, the end
    is a plain run's, and the incremental snapshots equal whole ones."""
    source = source.strip("\n") + "\n"
    assert_steps_match_plain(source)
    assert_same_as_plain(source)
    _assert_same(source)


@pytest.mark.parametrize("name", RECURRENT)
def test_recurrent_nets(name: str) -> None:
    assert_true_to_torch(RECURRENT[name])


@pytest.mark.parametrize("name", CHECKPOINT)
def test_checkpointing(name: str) -> None:
    assert_true_to_torch(CHECKPOINT[name])


def test_a_checkpointed_saved_slot_says_it_is_recomputed() -> None:
    result = trace(CHECKPOINT["non-reentrant checkpoint then backward"])
    assert result["ok"], result["error"]
    before_backward = [s for s in result["steps"] if s["line"] == 9][-1]
    messages = {m for node in before_backward["nodes"].values() for m in node["saved_errors"].values()}
    assert messages == {CHECKPOINT_SLOT}


@pytest.mark.parametrize("name", CUSTOM_FUNCTIONS)
def test_custom_functions(name: str) -> None:
    assert_true_to_torch(CUSTOM_FUNCTIONS[name])


@pytest.mark.parametrize("name", WARNINGS)
def test_warnings_point_at_the_snippet(name: str) -> None:
    assert_true_to_torch(WARNINGS[name])
    assert "<snippet>:" in trace(WARNINGS[name].strip("\n") + "\n")["steps"][-1]["stdout"]


@pytest.mark.parametrize("name", TORCH_FUNC)
def test_torch_func_transforms(name: str) -> None:
    source = TORCH_FUNC[name].strip("\n") + "\n"
    assert_true_to_torch(source)
    from app.schema import DeltaTrace
    from app.trace.consistency import problem

    assert problem(DeltaTrace.model_validate(trace_delta(source))) is None  # what the sandbox checks


@pytest.mark.parametrize("name", ATTENTION)
def test_attention(name: str) -> None:
    assert_true_to_torch(ATTENTION[name])


def test_has_torch_function_answers_as_in_a_plain_run() -> None:
    assert_true_to_torch("""
from torch.overrides import TorchFunctionMode
class Quiet(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
class Sub(torch.Tensor):
    pass
t = torch.ones(2)
print(torch.overrides.has_torch_function((t,)))
print(torch.overrides.has_torch_function((t.as_subclass(Sub),)))
with Quiet():
    print(torch.overrides.has_torch_function((t,)))
    u = t * 2
""")
