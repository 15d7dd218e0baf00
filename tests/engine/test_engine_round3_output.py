"""Round 3 (issue 24): what the snippet prints and the tutorials' programs, each held to torch by
``assert_true_to_torch`` (every step as a plain run paused there, the end and its output as a plain
run's, incremental snapshots equal to whole ones): tracebacks the snippet prints itself, warnings
from torch's Python code and the snippet's own filters, printed tensors and modules, versions and
grad modes read by the snippet, weak references, errors the snippet catches; and the programs of
PyTorch's tutorials in small: word language model, style transfer with LBFGS, DQN, REINFORCE, FGSM,
spatial transformer, a CNN through ``random_split`` loaders.

Found wrong here, and fixed:

* a traceback the snippet prints (``traceback.print_exc()``, ``format_exception(e)``, walking
  ``e.__traceback__``) of an error raised in a torch call held the engine's frames (its
  ``__torch_function__`` mode's, its one-line call's, and torch's ``handle_torch_function`` with the
  first entry of a Python-written torch function that led to it): they are now spliced out of the
  chain when the exception reaches a snippet frame (app.engine.frames);
* ``torch.autograd.graph.increment_version(x)`` bumps a version in C++ with no torch call to see:
  the incremental step kept the old version.
"""

from __future__ import annotations

import pytest

from tests.engine.test_engine_real_code import assert_true_to_torch

PRINTED = {
    "warnings from torch's python code at construction and in calls": """
lstm = nn.LSTM(2, 3, dropout=0.5)
enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, 8, norm_first=True), 2)
net = nn.Linear(2, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.StepLR(opt, 1)
sched.step()
x = torch.range(0, 3)
m = torch.randn(2, 3, 4).T
""",
    "warnings in a loop print once, a non-leaf grad read twice": """
x = torch.randn(3, requires_grad=True)
for i in range(3):
    y = x * 2
    print(y.grad)
    p = F.softmax(y)
z = y.grad
""",
    "checkpoint without use_reentrant, GradScaler from cuda.amp, autocast float16 on cpu": """
from torch.utils.checkpoint import checkpoint
x = torch.randn(2, 3, requires_grad=True)
lin = nn.Linear(3, 3)
try:
    out = checkpoint(lin, x)
    out.sum().backward()
except Exception as e:
    print(type(e).__name__)
with torch.autocast("cpu", dtype=torch.float16):
    y = lin(x)
print(y.dtype)
""",
    "warnings.warn by the snippet, simplefilter and catch_warnings": """
import warnings
def f(t):
    warnings.warn("careful", stacklevel=2)
    return t * 2
a = f(torch.ones(2))
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    b = F.softmax(torch.ones(2))
    print(len(w), w[0].category.__name__)
warnings.simplefilter("error")
try:
    c = F.softmax(torch.ones(2))
except UserWarning as e:
    print("raised", str(e)[:30])
warnings.resetwarnings()
""",
    "printing tensors, parameters, modules, grads and graph nodes": """
net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
print(net)
print(net[0].weight)
x = torch.randn(2, 2, requires_grad=True)
y = net(x)
print(y)
print(y.grad_fn.name(), y.grad_fn.next_functions[0][0].name())
y.sum().backward()
print(x.grad, x.grad_fn, x.is_leaf)
print(repr(net[0].bias.grad))
print(f"{y.sum().item():.4f}", y.shape, y.dtype, y.requires_grad)
print(torch.tensor([1.5, float("nan"), float("inf")]), torch.tensor([1, 2], dtype=torch.int8))
print(torch.zeros(2, dtype=torch.bfloat16), torch.tensor([1+2j]), torch.tensor([True]))
""",
    "errors the snippet makes: backward twice, in-place on a leaf, a saved tensor modified": """
x = torch.randn(3, requires_grad=True)
try:
    x.add_(1)
except RuntimeError as e:
    print(str(e))
y = x.exp()
y.add_(1)
try:
    y.sum().backward()
except RuntimeError as e:
    print(str(e)[:120])
z = x.sigmoid()
s = z.sum()
s.backward()
try:
    s.backward()
except RuntimeError as e:
    print(str(e)[:80])
w = torch.randn(2, 2).requires_grad_()
w.sum().backward()
print(w.grad)
v = (x * 2)
v.backward()
""",
    "traceback printed by the snippet from a failing backward and a failing op": """
import traceback
x = torch.randn(3, requires_grad=True)
y = x.exp()
y.add_(1)
try:
    y.sum().backward()
except RuntimeError:
    traceback.print_exc()
try:
    torch.mm(torch.ones(2, 3), torch.ones(2, 3))
except RuntimeError as e:
    print("".join(traceback.format_exception(e)))
lin = nn.Linear(3, 2)
try:
    lin(torch.ones(2, 4))
except RuntimeError:
    traceback.print_exc()
""",
    "weak references and deletion: a tensor and a graph node die when the snippet drops them": """
import weakref, gc
x = torch.randn(3, requires_grad=True)
y = x.exp()
rx = weakref.ref(y)
rn = weakref.ref(y.grad_fn) if hasattr(y.grad_fn, "__weakref__") else None
del y
gc.collect()
print(rx() is None)
z = torch.randn(2)
rz = weakref.ref(z)
z = None
print(rz() is None)
net = nn.Linear(2, 2)
rw = weakref.ref(net.weight)
del net
gc.collect()
print(rw() is None)
""",
    "versions, grad mode and data pointers printed by the snippet": """
x = torch.randn(3, requires_grad=True)
y = x * 2
print(x._version, y._version)
y.add_(1)
y[0] = 5
print(y._version, torch.is_grad_enabled())
with torch.no_grad():
    print(torch.is_grad_enabled(), torch.is_inference_mode_enabled())
v = y.view(3)
print(v._version, v._base is y, v.data_ptr() == y.data_ptr(), v.is_contiguous())
print("skip")
print(y.grad_fn._saved_other if hasattr(y.grad_fn, "_saved_other") else y.grad_fn.name())
print(torch.autograd.graph.increment_version(x) is None, x._version)
print(torch.get_rng_state().sum().item())
""",
    "the snippet inspects its own stack and frames": """
import inspect, sys
def f(t):
    frame = inspect.currentframe()
    print(frame.f_code.co_name, frame.f_back.f_code.co_name, len(inspect.stack()) > 0)
    return t * 2
y = f(torch.ones(2))
def g():
    return sys._getframe(1).f_code.co_name
print(g())
print(__name__)
print(sorted(k for k in globals() if not k.startswith("__")))
""",
    "hook raising inside backward, caught by the snippet": """
x = torch.randn(3, requires_grad=True)
def bad(g):
    raise ValueError("no")
h = x.register_hook(bad)
try:
    (x * 2).sum().backward()
except ValueError as e:
    print("caught", e)
h.remove()
(x * 3).sum().backward()
class F1(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        return a * 1
    @staticmethod
    def backward(ctx, g):
        raise RuntimeError("custom boom")
try:
    F1.apply(x).sum().backward()
except RuntimeError as e:
    print(str(e))
""",
    "tracebacks: python torch functions, module forwards, hooks, custom Functions, counted by hand": """
import traceback, sys
x = torch.randn(2, 3, requires_grad=True)
try:
    F.softmax(x, dim=5)
except IndexError:
    traceback.print_exc()
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
    def forward(self, t):
        h = self.fc(t)
        return h @ h
try:
    Net()(x)
except RuntimeError as e:
    print(len(traceback.extract_tb(e.__traceback__)))
    tb = sys.exc_info()[2]
    n = 0
    while tb is not None:
        n += 1
        tb = tb.tb_next
    print(n)
    traceback.print_exception(type(e), e, e.__traceback__)
def bad(g):
    raise ValueError("no")
x.register_hook(bad)
try:
    (x * 2).sum().backward()
except ValueError:
    traceback.print_exc()
class Boom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        return a.view(7)
    @staticmethod
    def backward(ctx, g):
        return g
try:
    Boom.apply(x)
except RuntimeError:
    traceback.print_exc()
try:
    torch.tensor([[1, 2], [3]])
except ValueError:
    print(traceback.format_exc())
try:
    x.sum(dim=4)
except IndexError as e:
    print(traceback.format_exception(e)[-2:])
""",
}

TUTORIALS = {
    "word language model: repackage_hidden recursively, tied weights, clip": """
def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)
class RNNModel(nn.Module):
    def __init__(self, ntoken, nhid):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, nhid)
        self.rnn = nn.LSTM(nhid, nhid, 1)
        self.decoder = nn.Linear(nhid, ntoken)
        self.decoder.weight = self.encoder.weight
    def forward(self, input, hidden):
        emb = self.encoder(input)
        output, hidden = self.rnn(emb, hidden)
        return self.decoder(output), hidden
    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(1, bsz, 3), weight.new_zeros(1, bsz, 3))
model = RNNModel(5, 3)
data = torch.randint(0, 5, (6, 2))
hidden = model.init_hidden(2)
for i in range(0, 4, 2):
    inp, target = data[i:i + 2], data[i + 1:i + 3]
    model.zero_grad()
    hidden = repackage_hidden(hidden)
    output, hidden = model(inp, hidden)
    loss = F.cross_entropy(output.view(-1, 5), target.reshape(-1))
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.1)
""",
    "neural style transfer: losses stored by modules, input image optimised with LBFGS and clamped": """
def gram_matrix(input):
    a, b, c, d = input.size()
    features = input.view(a * b, c * d)
    G = torch.mm(features, features.t())
    return G.div(a * b * c * d)
class ContentLoss(nn.Module):
    def __init__(self, target):
        super().__init__()
        self.target = target.detach()
    def forward(self, input):
        self.loss = F.mse_loss(input, self.target)
        return input
class StyleLoss(nn.Module):
    def __init__(self, target_feature):
        super().__init__()
        self.target = gram_matrix(target_feature).detach()
    def forward(self, input):
        G = gram_matrix(input)
        self.loss = F.mse_loss(G, self.target)
        return input
conv = nn.Conv2d(1, 2, 3, padding=1)
conv.requires_grad_(False)
style_img = torch.rand(1, 1, 4, 4)
content_img = torch.rand(1, 1, 4, 4)
cl = ContentLoss(conv(content_img))
sl = StyleLoss(conv(style_img))
model = nn.Sequential(conv, cl, sl)
input_img = content_img.clone()
input_img.requires_grad_(True)
optimizer = torch.optim.LBFGS([input_img])
run = [0]
while run[0] <= 4:
    def closure():
        with torch.no_grad():
            input_img.clamp_(0, 1)
        optimizer.zero_grad()
        model(input_img)
        loss = sl.loss * 1000 + cl.loss
        loss.backward()
        run[0] += 1
        return sl.loss + cl.loss
    optimizer.step(closure)
with torch.no_grad():
    input_img.clamp_(0, 1)
""",
    "DQN: replay memory of namedtuples, gather, soft update of a target net, clip by value": """
import random
from collections import namedtuple, deque
Transition = namedtuple("Transition", ("state", "action", "next_state", "reward"))
memory = deque([], maxlen=10)
policy_net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 2))
target_net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 2))
target_net.load_state_dict(policy_net.state_dict())
optimizer = torch.optim.AdamW(policy_net.parameters(), lr=1e-2, amsgrad=True)
for t in range(4):
    state = torch.randn(1, 2)
    with torch.no_grad():
        action = policy_net(state).max(1).indices.view(1, 1)
    memory.append(Transition(state, action, torch.randn(1, 2), torch.tensor([1.0])))
batch = Transition(*zip(*random.sample(memory, 3)))
state_batch = torch.cat(batch.state)
action_batch = torch.cat(batch.action)
reward_batch = torch.cat(batch.reward)
state_action_values = policy_net(state_batch).gather(1, action_batch)
with torch.no_grad():
    next_values = target_net(torch.cat(batch.next_state)).max(1).values
expected = (next_values * 0.99) + reward_batch
loss = nn.SmoothL1Loss()(state_action_values, expected.unsqueeze(1))
optimizer.zero_grad()
loss.backward()
torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
optimizer.step()
target_sd = target_net.state_dict()
policy_sd = policy_net.state_dict()
for key in policy_sd:
    target_sd[key] = policy_sd[key] * 0.005 + target_sd[key] * (1 - 0.005)
target_net.load_state_dict(target_sd)
""",
    "REINFORCE: saved log probs, normalised returns, policy loss concatenated": """
from torch.distributions import Categorical
policy = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2), nn.Softmax(dim=-1))
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
saved_log_probs = []
rewards = []
for step in range(3):
    state = torch.randn(3).unsqueeze(0)
    probs = policy(state)
    m = Categorical(probs)
    action = m.sample()
    saved_log_probs.append(m.log_prob(action))
    rewards.append(float(action.item()))
R = 0
returns = []
for r in rewards[::-1]:
    R = r + 0.9 * R
    returns.insert(0, R)
returns = torch.tensor(returns)
returns = (returns - returns.mean()) / (returns.std() + 1e-8)
policy_loss = []
for log_prob, R in zip(saved_log_probs, returns):
    policy_loss.append(-log_prob * R)
opt.zero_grad()
policy_loss = torch.cat(policy_loss).sum()
policy_loss.backward()
opt.step()
del saved_log_probs[:]
""",
    "FGSM: data.requires_grad set on a batch, sign of its grad, clamped perturbation": """
model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
model.eval()
data = torch.rand(2, 1, 2, 2)
target = torch.tensor([0, 2])
data.requires_grad = True
output = model(data)
init_pred = output.max(1, keepdim=True)[1]
loss = F.nll_loss(F.log_softmax(output, dim=1), target)
model.zero_grad()
loss.backward()
data_grad = data.grad.data
sign_data_grad = data_grad.sign()
perturbed = data + 0.25 * sign_data_grad
perturbed = torch.clamp(perturbed, 0, 1)
final_pred = model(perturbed).max(1, keepdim=True)[1]
correct = (final_pred == target.view_as(final_pred)).sum().item()
adv_ex = perturbed.squeeze().detach().numpy()
""",
    "spatial transformer: affine_grid and grid_sample with a learned theta": """
loc = nn.Linear(4, 6)
with torch.no_grad():
    loc.weight.zero_()
    loc.bias.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))
x = torch.rand(2, 1, 2, 2)
theta = loc(x.view(2, -1)).view(-1, 2, 3)
grid = F.affine_grid(theta, x.size(), align_corners=False)
y = F.grid_sample(x, grid, align_corners=False)
loss = y.sum()
loss.backward()
""",
    "CNN through a DataLoader with random_split, accuracy counted": """
from torch.utils.data import TensorDataset, DataLoader, random_split
X = torch.randn(12, 1, 4, 4)
Y = torch.randint(0, 2, (12,))
ds = TensorDataset(X, Y)
train_ds, val_ds = random_split(ds, [8, 4])
train = DataLoader(train_ds, batch_size=4, shuffle=True)
val = DataLoader(val_ds, batch_size=4)
model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(8, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
loss_fn = nn.CrossEntropyLoss()
for epoch in range(2):
    model.train()
    for xb, yb in train:
        pred = model(xb)
        loss = loss_fn(pred, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for xb, yb in val:
            correct += (model(xb).argmax(1) == yb).type(torch.float).sum().item()
    print(epoch, correct / len(val_ds))
rm = model[1].running_mean
""",
}


@pytest.mark.parametrize("name", PRINTED)
def test_printed(name: str) -> None:
    assert_true_to_torch(PRINTED[name])


@pytest.mark.parametrize("name", TUTORIALS)
def test_tutorials(name: str) -> None:
    assert_true_to_torch(TUTORIALS[name])
