"""Round 3 of the code people write (issue 24), continued (see test_engine_round3.py): norms and
dropouts in train and eval, clipping, distributions, attention with padding masks, upsampling and
unfolding layers, losses with their options, optimizers' less common options, generators as loaders,
autocast, and custom Functions (``once_differentiable``, ``set_materialize_grads(False)``,
``mark_dirty``, vmap rules) with torch.func and ``checkpoint_sequential``; each held to torch by
``assert_true_to_torch``.
"""

from __future__ import annotations

import pytest

from tests.engine.test_engine_real_code import assert_true_to_torch

LAYERS_AND_LOSSES = {
    "group and instance and layer norm, train and eval": """
gn = nn.GroupNorm(2, 4)
inn = nn.InstanceNorm1d(4, affine=True, track_running_stats=True)
ln = nn.LayerNorm(5, elementwise_affine=False)
x = torch.randn(2, 4, 5, requires_grad=True)
a = gn(x)
b = inn(x)
c = ln(x)
(a.sum() + b.pow(2).sum() + c.exp().sum()).backward()
inn.eval()
b2 = inn(x)
rm = inn.running_mean
bn = nn.BatchNorm1d(4, momentum=0.5)
bn(x)
bn(x * 2)
bn.eval()
e = bn(x)
rv = bn.running_var
nb = bn.num_batches_tracked
""",
    "dropout modules and functional in train and eval, in place": """
d = nn.Dropout(0.3)
x = torch.randn(4, 4, requires_grad=True)
a = d(x)
y = x * 1
F.dropout(y, 0.5, training=True, inplace=True)
d.eval()
b = d(x)
ad = nn.AlphaDropout(0.2)
c = ad(x)
fd = F.dropout1d(x.unsqueeze(0), 0.5)
loss = (a + y + c).sum()
loss.backward()
""",
    "clip_grad_norm_ foreach and not, clip_grad_value_": """
net = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
x = torch.randn(5, 3)
loss = net(x).pow(2).sum() * 100
loss.backward()
n1 = nn.utils.clip_grad_norm_(net.parameters(), 1.0)
n2 = nn.utils.clip_grad_norm_(net.parameters(), 0.5, norm_type=1, foreach=False)
n3 = nn.utils.clip_grad_norm_(net.parameters(), 0.5, norm_type=float("inf"))
nn.utils.clip_grad_value_(net.parameters(), 0.01)
g = net[0].weight.grad
""",
    "distributions rsample, log_prob, entropy backward": """
from torch.distributions import Normal, Categorical
mu = torch.zeros(3, requires_grad=True)
sigma = torch.ones(3, requires_grad=True)
d = Normal(mu, sigma)
s = d.rsample()
lp = d.log_prob(s).sum()
ent = d.entropy().sum()
logits = torch.randn(4, requires_grad=True)
c = Categorical(logits=logits)
a = c.sample()
loss = -(c.log_prob(a) * 2.0) - lp + ent
loss.backward()
""",
    "nn.Parameter made from a non-leaf, requires_grad_ freezing": """
x = torch.randn(3, requires_grad=True)
p = nn.Parameter(x * 2)
net = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
for q in net[0].parameters():
    q.requires_grad_(False)
loss = net(p).sum()
loss.backward()
g0 = net[0].weight.grad
g1 = net[1].weight.grad
net[0].weight.requires_grad = True
loss2 = net(p).sum()
loss2.backward()
""",
    "attention with masked_fill -inf and key padding mask": """
q = torch.randn(2, 3, 4, requires_grad=True)
k = torch.randn(2, 3, 4)
v = torch.randn(2, 3, 4)
mask = torch.tensor([[1, 1, 0], [1, 0, 0]]).bool()
scores = q @ k.transpose(-2, -1) / math.sqrt(4)
scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
attn = scores.softmax(dim=-1)
out = attn @ v
out.sum().backward()
mha = nn.MultiheadAttention(4, 2, batch_first=True)
o, w = mha(q, k, v, key_padding_mask=~mask, need_weights=True)
o2, w2 = mha(q, q, q, need_weights=False)
(o.sum() + o2.sum()).backward()
""",
    "conv transpose, interpolate, pixel shuffle, unfold": """
x = torch.randn(1, 4, 3, 3, requires_grad=True)
ct = nn.ConvTranspose2d(4, 2, 2, stride=2)
a = ct(x)
b = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
c = F.pixel_shuffle(x, 2)
d = F.unfold(x, kernel_size=2)
e = nn.Upsample(scale_factor=2, mode="nearest")(x)
f = F.adaptive_avg_pool2d(x, 1).flatten(1)
loss = a.sum() + b.mean() + c.pow(2).sum() + d.sum() + e.sum() + f.sum()
loss.backward()
""",
    "losses with options": """
logits = torch.randn(4, 3, requires_grad=True)
target = torch.tensor([0, 2, -100, 1])
l1 = F.cross_entropy(logits, target, ignore_index=-100, label_smoothing=0.1)
l2 = F.nll_loss(F.log_softmax(logits, 1), target.clamp(min=0), weight=torch.tensor([1., 2., 3.]))
l3 = F.binary_cross_entropy_with_logits(logits, torch.rand(4, 3), pos_weight=torch.ones(3) * 2)
l4 = F.smooth_l1_loss(logits, torch.zeros(4, 3), beta=0.5)
l5 = F.kl_div(F.log_softmax(logits, 1), F.softmax(torch.randn(4, 3), 1), reduction="batchmean")
l6 = nn.HuberLoss()(logits, torch.ones(4, 3))
l7 = F.cosine_embedding_loss(logits, torch.randn(4, 3), torch.tensor([1, -1, 1, -1]))
(l1 + l2 + l3 + l4 + l5 + l6 + l7).backward()
""",
    "optimizer zero_grad set_to_none False, weight decay, nesterov, state read": """
net = nn.Linear(3, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2)
x = torch.randn(4, 3)
for i in range(2):
    opt.zero_grad(set_to_none=False)
    net(x).sum().backward()
    opt.step()
buf = opt.state[net.weight]["momentum_buffer"]
sd = opt.state_dict()
opt2 = torch.optim.Adamax(net.parameters())
net(x).sum().backward()
opt2.step()
opt3 = torch.optim.NAdam(net.parameters(), lr=0.01)
opt3.step()
opt4 = torch.optim.RAdam(net.parameters(), lr=0.01, decoupled_weight_decay=True, weight_decay=0.1)
opt4.step()
""",
    "a generator yielding batches and an iterator class": """
def batches(x, y, size):
    for i in range(0, len(x), size):
        yield x[i:i + size], y[i:i + size]
class Loader:
    def __init__(self, x):
        self.x = x
    def __iter__(self):
        return iter(self.x.split(2))
net = nn.Linear(2, 1)
opt = torch.optim.Adam(net.parameters(), lr=0.1)
X = torch.randn(6, 2)
Y = torch.randn(6, 1)
for xb, yb in batches(X, Y, 3):
    loss = F.mse_loss(net(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
total = sum(net(b).sum() for b in Loader(X))
""",
    "autocast bfloat16 forward and loss in float32": """
net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(3, 4)
y = torch.tensor([0, 1, 1])
for i in range(2):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(x)
        mm = x @ x.t()
    loss = F.cross_entropy(out.float(), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.autocast(device_type="cpu", enabled=False):
    plain = net(x)
@torch.autocast("cpu")
def f(a):
    return a @ a
fa = f(x[:, :3].contiguous()[:3])
""",
}

FUNCTIONS = {
    "custom Function with once_differentiable and materialize grads off": """
from torch.autograd.function import once_differentiable
class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        ctx.lo = lo
        return x.clamp(min=lo), (x < lo)
    @staticmethod
    @once_differentiable
    def backward(ctx, g, gmask):
        x, = ctx.saved_tensors
        if g is None:
            return None, None
        return g * (x >= ctx.lo), None
x = torch.randn(4, requires_grad=True)
out, mask = Clamp.apply(x, 0.0)
loss = out.sum()
loss.backward()
print(x.grad, mask)
""",
    "custom Function mark_dirty in-place relu": """
class InplaceRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.clamp_(min=0)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x
    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * (x > 0)
a = torch.randn(5, requires_grad=True)
b = a * 1
c = InplaceRelu.apply(b)
d = c.sum()
d.backward()
""",
    "Function with vmap staticmethod through torch.func": """
class Cube(torch.autograd.Function):
    generate_vmap_rule = True
    @staticmethod
    def forward(x):
        return x ** 3, x
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
    @staticmethod
    def backward(ctx, g, _):
        x, = ctx.saved_tensors
        return 3 * x ** 2 * g
x = torch.randn(3, requires_grad=True)
y, _ = Cube.apply(x)
y.sum().backward()
g = torch.func.grad(lambda t: Cube.apply(t)[0].sum())(x.detach())
v = torch.func.vmap(lambda t: Cube.apply(t)[0])(torch.randn(2, 3))
""",
    "torch.func grad has_aux, jacrev argnums, functional_call over a model": """
from torch.func import grad, jacrev, vmap, functional_call, hessian
net = nn.Linear(3, 1)
params = {k: v.detach() for k, v in net.named_parameters()}
def loss_fn(p, x, y):
    out = functional_call(net, p, (x,))
    loss = ((out - y) ** 2).mean()
    return loss, out
x = torch.randn(4, 3)
y = torch.randn(4, 1)
grads, out = grad(loss_fn, has_aux=True)(params, x, y)
gw = grads["weight"]
j = jacrev(lambda a, b: (a * b).sin(), argnums=(0, 1))(torch.randn(2), torch.randn(2))
h = hessian(lambda t: t.pow(3).sum())(torch.randn(2))
per = vmap(grad(lambda p, xi, yi: loss_fn(p, xi, yi)[0]), in_dims=(None, 0, 0))(params, x, y)
""",
    "checkpoint_sequential and checkpoint with a kwargs module": """
from torch.utils.checkpoint import checkpoint, checkpoint_sequential
net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
x = torch.randn(2, 3, requires_grad=True)
out = checkpoint_sequential(net, 2, x, use_reentrant=False)
out.sum().backward()
g = x.grad
def block(a, scale=1.0):
    return F.gelu(a) * scale
h = torch.randn(2, 3, requires_grad=True)
o = checkpoint(block, h, use_reentrant=False, scale=2.0)
o2 = checkpoint(block, o, use_reentrant=False)
o2.sum().backward()
""",
}


@pytest.mark.parametrize("name", LAYERS_AND_LOSSES)
def test_layers_and_losses(name: str) -> None:
    assert_true_to_torch(LAYERS_AND_LOSSES[name])


@pytest.mark.parametrize("name", FUNCTIONS)
def test_functions(name: str) -> None:
    assert_true_to_torch(FUNCTIONS[name])
