"""The autograd mechanics notes as code, and the warnings tutorial code meets (each must name the
snippet's line, as in a plain run); the default device and tensor type."""

from __future__ import annotations

from tutorial_registry import snippet

# -- autograd mechanics ----------------------------------------------------------------------------

snippet("autograd-mechanics-saved", """\
x = torch.randn(5, requires_grad=True)
y = x.pow(2)
print(x.equal(y.grad_fn._saved_self))
print(x is y.grad_fn._saved_self)
y = x.exp()
print(y.equal(y.grad_fn._saved_result))
print(y is y.grad_fn._saved_result)
def pack_hook(x):
    print("Packing", x.shape)
    return x
def unpack_hook(x):
    print("Unpacking", x.shape)
    return x
a = torch.ones(5, requires_grad=True)
b = torch.ones(5, requires_grad=True) * 2
with torch.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook):
    y = a * b
y.sum().backward()
""")

snippet("autograd-mechanics-grad-modes", """\
x = torch.zeros(1, requires_grad=True)
with torch.no_grad():
    y = x * 2
print(y.requires_grad)
is_train = False
with torch.set_grad_enabled(is_train):
    y = x * 2
print(y.requires_grad)
torch.set_grad_enabled(True)
y = x * 2
print(y.requires_grad)
torch.set_grad_enabled(False)
y = x * 2
print(y.requires_grad)
torch.set_grad_enabled(True)
@torch.no_grad()
def doubler(x):
    return x * 2
z = doubler(x)
print(z.requires_grad)
@torch.enable_grad()
def tripler(x):
    return x * 3
with torch.no_grad():
    z = tripler(x)
print(z.requires_grad)
""")

snippet("autograd-mechanics-inplace-error", """\
a = torch.randn(3, requires_grad=True)
b = a.sigmoid()
b.mul_(2)
try:
    b.sum().backward()
except RuntimeError as e:
    print(type(e).__name__, str(e)[:80])
""")

snippet("autograd-complex", """\
x = torch.randn(3, dtype=torch.cfloat, requires_grad=True)
y = (x * x.conj()).real.sum()
y.backward()
print(torch.allclose(x.grad, 2 * x), x.grad.dtype)
print(torch.view_as_real(torch.tensor([1+2j])))
""")

snippet("autograd-hooks-doc", """\
a = torch.tensor(2., requires_grad=True)
b = a * 3
b.retain_grad()
b.register_hook(lambda grad: print("grad of b", grad))
c = b.exp()
c.grad_fn.register_hook(lambda gi, go: print("node hook", len(gi), len(go)))
c.grad_fn.register_prehook(lambda go: print("node prehook", go[0].shape))
c.backward()
print(b.grad is not None, a.grad)
def hook(grads):
    print("multi", [g is None for g in grads])
x = torch.ones(2, requires_grad=True)
y = torch.ones(2, requires_grad=True)
torch.autograd.graph.register_multi_grad_hook((x, y), hook)
(x * y).sum().backward()
""")

snippet("anomaly", """\
import warnings
with torch.autograd.detect_anomaly():
    a = torch.ones(2, requires_grad=True)
    out = (a * 2).sum()
    out.backward()
print(a.grad)
torch.autograd.set_detect_anomaly(False)
print(torch.is_anomaly_enabled())
""")

snippet("variable-legacy", """\
from torch.autograd import Variable
x = Variable(torch.ones(2, 2), requires_grad=True)
y = x + 2
z = y * y * 3
out = z.mean()
out.backward()
print(x.grad, x.data)
""")

# -- warnings, which name the snippet's line -------------------------------------------------------

snippet("deprecation-warnings", """\
x = torch.ones(2, 3, 4)
print(x.T.shape)
t = torch.tensor(torch.ones(2))
print(t)
l = nn.MSELoss(size_average=False)
print(l(torch.ones(2), torch.zeros(2)))
w = torch.empty(2, 2)
nn.init.xavier_uniform(w)
print(w.shape)
print(torch.range(0, 3))
""")

snippet("scheduler-order-warning", """\
model = nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=1.0)
sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
sched.step()
opt.step()
print(sched.get_last_lr())
""")

snippet("cuda-amp-deprecated", """\
scaler = torch.cuda.amp.GradScaler()
print(scaler.is_enabled())
""")

snippet("warn-in-snippet", """\
import warnings
def f(x):
    if x.sum() > 0:
        warnings.warn("positive input")
    return x
f(torch.ones(2))
warnings.warn("stacked", stacklevel=1)
warnings.warn(DeprecationWarning("deprecated thing"))
warnings.warn("user runtime", RuntimeWarning)
print("done")
""")

snippet("softmax-implicit-dim", """\
x = torch.ones(2, 3)
y = F.softmax(x)
z = F.log_softmax(x)
print(y.shape, z.shape)
""")

# -- the default device and tensor type ------------------------------------------------------------

snippet("default-device-cpu", """\
torch.set_default_device("cpu")
x = torch.ones(2, requires_grad=True)
(x * 2).sum().backward()
print(x.grad, x.device, torch.get_default_device())
""")

snippet("default-device-meta", """\
torch.set_default_device("meta")
x = torch.ones(2, requires_grad=True)
y = (x * 2).sum()
print(y.device, y.shape)
""")

snippet("device-context", """\
with torch.device("meta"):
    m = nn.Linear(3, 2)
print(m.weight.device)
with torch.device("cpu"):
    m = nn.Linear(3, 2)
print(m.weight.device)
m2 = nn.Linear(4, 2, device="meta")
print(m2.weight.is_meta)
""")

snippet("default-tensor-type", """\
torch.set_default_tensor_type(torch.DoubleTensor)
print(torch.ones(1).dtype)
torch.set_default_tensor_type(torch.FloatTensor)
print(torch.ones(1).dtype)
""")


# -- extending torch: __torch_function__ on a class of one's own, a subclass, a mode ----------------

snippet("extending-scalar-tensor", """\
import functools
HANDLED_FUNCTIONS = {}
class ScalarTensor(object):
    def __init__(self, N, value):
        self.N = N
        self.value = value
    def __repr__(self):
        return "ScalarTensor(N={}, value={})".format(self.N, self.value)
    def tensor(self):
        return self.value * torch.eye(self.N)
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if func not in HANDLED_FUNCTIONS or not all(
            issubclass(t, (torch.Tensor, ScalarTensor))
            for t in types
        ):
            return NotImplemented
        return HANDLED_FUNCTIONS[func](*args, **kwargs)
def implements(torch_function):
    def decorator(func):
        functools.update_wrapper(func, torch_function)
        HANDLED_FUNCTIONS[torch_function] = func
        return func
    return decorator
@implements(torch.mean)
def mean(input):
    return float(input.value) / input.N
d = ScalarTensor(5, 2)
print(d, torch.mean(d), d.tensor().sum())
try:
    torch.sum(d)
except TypeError as e:
    print(str(e)[:60])
""")

snippet("extending-logging-tensor", """\
class LoggingTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.add:
            print("add called")
        if kwargs is None:
            kwargs = {}
        return super().__torch_function__(func, types, args, kwargs)
t = torch.ones(2, requires_grad=True).as_subclass(LoggingTensor)
u = t.add(1)
u.sum().backward()
print(type(u).__name__, u.tolist(), t.grad)
""")

snippet("extending-function-mode", """\
from torch.overrides import TorchFunctionMode, has_torch_function
class PrintMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        print("call", func.__name__)
        return func(*args, **(kwargs or {}))
with PrintMode():
    y = torch.ones(2) + 1
print(y, has_torch_function((y,)))
""")


# -- issue 24's own examples, as tutorials meet them -----------------------------------------------

snippet("issue-gru-grad", """\
gru = nn.GRU(3, 4, batch_first=True)
x = torch.randn(2, 5, 3)
h = torch.zeros(1, 2, 4)
for step in range(2):
    out, h = gru(x, h)
    loss = out.pow(2).mean()
    loss.backward()
    h = h.detach()
print(round(loss.item(), 4), gru.weight_hh_l0.grad.shape)
cell = nn.GRUCell(3, 4)
hx = torch.zeros(2, 4)
for t in range(3):
    hx = cell(x[:, t], hx)
hx.sum().backward()
print(cell.bias_hh.grad.shape)
""")

snippet("issue-checkpoint-nonreentrant", """\
from torch.utils.checkpoint import checkpoint
def f(x):
    return torch.sin(x).exp() * 2
x = torch.randn(4, requires_grad=True)
y = checkpoint(f, x, use_reentrant=False)
y.sum().backward()
print(torch.allclose(x.grad, (torch.sin(x).exp() * torch.cos(x) * 2).detach()))
lin = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
out = checkpoint(lin, torch.randn(2, 4, requires_grad=True), use_reentrant=False)
out.sum().backward()
print(lin[0].weight.grad.shape)
""")

snippet("issue-nested-func-grad", """\
from torch.func import grad
def f(x):
    return torch.sin(x)
x = torch.tensor(0.5)
print(grad(grad(f))(x), -torch.sin(x))
print(grad(grad(grad(f)))(x))
""")

snippet("issue-softmax-warning-points-here", """\
x = torch.ones(2, 3)
y = F.softmax(x)
print(y.sum())
""")

snippet("issue-bn-running-stats", """\
bn = nn.BatchNorm1d(3)
for _ in range(2):
    out = bn(torch.randn(4, 3))
print(bn.running_mean, bn.running_var, bn.num_batches_tracked)
snap = bn.running_mean.clone()
print(snap)
""")

snippet("issue-function-output-local", """\
class Sorter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        values, idx = x.sort()
        ctx.save_for_backward(idx)
        return values
    @staticmethod
    def backward(ctx, g):
        idx, = ctx.saved_tensors
        return torch.zeros_like(g).scatter(0, idx, g)
x = torch.tensor([3.0, 1.0, 2.0], requires_grad=True)
y = Sorter.apply(x)
print(y.requires_grad, y.is_leaf, y.grad_fn is not None)
y.sum().backward()
print(x.grad)
""")
