"""The autograd machinery as learners use it (issue 24): saved-tensor hooks, tensor subclasses and
modes, anomaly mode, hooks, double backward, custom Functions. Each snippet is checked three ways
against torch: every forward step says what torch says at that moment (``assert_steps_match_plain``),
the run ends as a plain run ends (``assert_same_as_plain``), incremental snapshots equal whole ones
(``_assert_same``).

Found wrong here, and fixed:

* snippet code called back from inside a torch call — a ``saved_tensors_hooks`` pack function, a
  tensor subclass's ``__torch_function__`` — runs while the call builds its node and writes its
  tensors in C++, where the engine's mode (off while its own call runs) sees nothing: the pack
  function's steps met the node with no saved tensors yet, and the incremental steps after it never
  read it again (the whole snapshot showed what the pack function returned); a subclass's in-place
  call inside its ``__torch_function__`` moved a version no step read;
* the engine's mode read a subclass tensor's ``_version`` and data pointer, which calls the snippet's
  ``__torch_function__``: its own lines ran as extra steps, its counters counted the engine's reads;
* what a pack hook returned (or a ``ctx`` attribute holds) is the very object the node keeps, not a
  copy torch makes at each access: matched to a "twin" with the same layout, it kept the twin's id
  when the snippet later named it (``t, rg = packed`` in the unpack hook) where the whole snapshot
  gave it its own;
* a storage's fact is written in the dtype of the first tensor met on it, and the whole snapshot meets
  a complex tensor and its real view in an order that moves from step to step (a backward step's
  gradients first): the incremental steps kept the dtype of the step that described it (the complex
  autograd tutorial); while such a storage is in R, every step is read whole;
* ``ctx.mark_dirty`` bumps the versions of a Function's inputs in C++ after forward, also when torch
  then refuses a leaf that requires grad: the leaf's later steps showed the version before the bump;
* anomaly mode's "Traceback of forward call that caused the error" listed the engine's frames: those
  that run the snippet, and the mode's and its one-line call around every torch call;
* ``y.grad_fn._raw_saved_self.register_hooks(pack, unpack)`` packs at once, through no torch call:
  the node kept showing the tensor it no longer holds;
* inside a backward pass, the nodes above the one running have been freed: a node of R further down
  (a saved copy found known again, to be matched anew) could not be found from R's parents, nor from
  the node read at that step unless it was its direct parent — the hessian of
  ``torch.autograd.functional`` (an op that saves its output, ``tanh``/``exp``, times its input) kept
  its saved output apart where the whole snapshot matched it to the live tensor;
* an ``AccumulateGrad`` met before its leaf had an id is found by its object's address, then filed
  under its leaf: the address key outlived the node, and another one made later at that address was
  taken for it by the whole snapshot (which meets nodes before their leaves more often) — after other
  runs in the same process, the same hessians disagreed.
"""

from __future__ import annotations

import re

import pytest
import torch
from torch_oracle import run_plain, trace

from tests.engine.test_engine_incremental import _assert_same
from tests.engine.test_engine_real_code import assert_true_to_torch

SAVED_TENSOR_HOOKS = {
    "pack and unpack functions around an op": """
def pack(t):
    print("pack", t.shape)
    return t.clone()
def unpack(t):
    return t
x = torch.randn(3, requires_grad=True)
with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    y = x.exp()
    z = (y * x).sum()
z.backward()
g = x.grad
""",
    "lambdas over a model's forward": """
model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
x = torch.randn(2, 3)
with torch.autograd.graph.saved_tensors_hooks(lambda t: t * 1, lambda t: t):
    out = model(x)
    loss = out.pow(2).mean()
loss.backward()
w = model[0].weight.grad
""",
    "packing a tuple, counting, unpacking by name": """
count = [0]
def pack(t):
    count[0] += 1
    print("packing", tuple(t.shape))
    return (t.detach(), t.requires_grad)
def unpack(packed):
    t, rg = packed
    return t
a = torch.randn(2, 2, requires_grad=True)
with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    b = a.sigmoid()
    c = b @ a
    d = c.tanh().sum()
d.backward()
print(count[0], a.grad)
""",
    "packing into a list by index, kept graphs in a loop": """
stash = []
def pack(t):
    stash.append(t)
    return len(stash) - 1
def unpack(i):
    return stash[i]
w = torch.randn(3, requires_grad=True)
losses = []
with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    for i in range(3):
        h = (w * i).exp()
        losses.append(h.sum())
total = sum(losses)
total.backward()
g = w.grad
""",
    "hooks entered in a module's forward hook; save_on_cpu": """
lin = nn.Linear(2, 2)
def pack(t):
    return t.clone()
def unpack(t):
    return t
def fhook(m, inp, out):
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        return out.exp()
lin.register_forward_hook(fhook)
y = lin(torch.randn(1, 2))
y.sum().backward()
x = torch.randn(3, requires_grad=True)
with torch.autograd.graph.save_on_cpu():
    s = x.sin() * x
s.sum().backward()
""",
}

SUBCLASSES_AND_MODES = {
    "a subclass that counts its torch calls": """
calls = []
class Logged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        calls.append(getattr(func, "__name__", "?"))
        return super().__torch_function__(func, types, args, kwargs or {})
x = torch.randn(3, requires_grad=True)
lx = x.as_subclass(Logged)
y = (lx * 2).sum()
y.backward()
g = x.grad
z = torch.zeros(3).as_subclass(Logged)
z.add_(1)
s = F.softmax(z, dim=0)
t = F.relu(z)
w = lx.detach().clone()
w.mul_(3)
w[0] = 5.0
print(len(calls), sorted(set(calls)))
""",
    "a mode of the snippet's own": """
from torch.overrides import TorchFunctionMode
log = []
class Count(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        log.append(getattr(func, "__name__", "?"))
        return func(*args, **(kwargs or {}))
a = torch.randn(3, requires_grad=True)
with Count():
    b = a.exp()
    b2 = F.softmax(b, 0)
    c = b2.sum()
    a2 = torch.zeros(3)
    a2.add_(1)
c.backward()
print(len(log), sorted(set(log)))
""",
    "apply_ with a Python function, a subclass through a module": """
x = torch.arange(4.0)
x.apply_(lambda v: v * 2 + 1)
class Tagged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        return out
lin = nn.Linear(4, 2)
h = lin(x.as_subclass(Tagged))
h.sum().backward()
print(type(h).__name__, lin.weight.grad)
""",
}


HIGHER_ORDER = {
    "torch.autograd.functional hessian of ops that save their output": """
from torch.autograd.functional import hessian, jacobian
x = torch.randn(3)
H = hessian(lambda t: (t.tanh() * t).sum(), x)
H2 = hessian(lambda t: (t.exp() * t).sum(), x, vectorize=True)
H3 = hessian(lambda t: t.sigmoid().sum(), x)
def f(t):
    return F.softmax(t, dim=0) * t
J = jacobian(f, x, create_graph=True)
""",
    "hand-written hessian rows, gradient penalty": """
def f(x):
    return (x.tanh() * x).sum()
x = torch.randn(3, requires_grad=True)
(g,) = torch.autograd.grad(f(x), x, create_graph=True)
rows = []
for i in range(3):
    (r,) = torch.autograd.grad(g[i], x, retain_graph=True)
    rows.append(r)
H = torch.stack(rows)
net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
z = torch.randn(3, 2, requires_grad=True)
out = net(z)
(gz,) = torch.autograd.grad(out.sum(), z, create_graph=True)
loss = out.mean() + 10 * (gz.norm(2, dim=1) - 1).pow(2).mean()
loss.backward()
""",
    "a saved tensor's own hooks, registered on the node": """
x = torch.randn(5, requires_grad=True)
y = x.pow(2)
y.grad_fn._raw_saved_self.register_hooks(lambda t: t * 2, lambda t: t / 2)
z = y.sum()
z.backward()
print(x.grad.shape)
""",
}


# Custom Functions: what Function.apply does in C++ after forward returns (the graph attached to the
# outputs, mark_dirty's version bump of the inputs — also when it then refuses a leaf).
CUSTOM_FUNCTIONS = {
    "mark_dirty on a view, then on a leaf that requires grad": """
class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.clamp_(min=0)
    @staticmethod
    def backward(ctx, g):
        return g
base = torch.randn(4, requires_grad=True)
h = base * 1
v = h[:2]
r = Clamp.apply(v)
print(type(h.grad_fn).__name__, r._version)
h.sum().backward()
leaf = torch.randn(2, requires_grad=True)
try:
    Clamp.apply(leaf)
except RuntimeError as e:
    print(str(e)[:70])
after = leaf * 1
""",
    "an input returned as non-differentiable, nested Functions, under no_grad": """
class F2(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        out = x.exp() + y
        ctx.save_for_backward(out)
        ctx.mark_non_differentiable(y)
        return out, y
    @staticmethod
    def backward(ctx, g, gy):
        (out,) = ctx.saved_tensors
        return g * out, None
class Inner(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2
    @staticmethod
    def backward(ctx, g):
        return g * 2
class Outer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        inner = Inner.apply(x)
        return inner + 1
    @staticmethod
    def backward(ctx, g):
        return g * 2
a = torch.randn(3, requires_grad=True)
b = torch.randn(3)
o, same = F2.apply(a, b)
print(same is b, o.requires_grad, same.requires_grad)
with torch.no_grad():
    n = Outer.apply(a)
y = Outer.apply(a)
(o.sum() + y.sum()).backward()
""",
    "a Function trained in a loop, tensors kept on ctx, gradcheck": """
class Lin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.b = b
        return x @ w.t() + b
    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, g.t() @ x, g.sum(0)
w = torch.randn(2, 3, requires_grad=True)
b = torch.zeros(2, requires_grad=True)
opt = torch.optim.SGD([w, b], lr=0.1)
x = torch.randn(4, 3)
for i in range(2):
    opt.zero_grad()
    out = Lin.apply(x, w, b)
    loss = out.pow(2).mean()
    loss.backward()
    opt.step()
xd = torch.randn(2, 3, dtype=torch.double, requires_grad=True)
wd = torch.randn(2, 3, dtype=torch.double, requires_grad=True)
bd = torch.randn(2, dtype=torch.double, requires_grad=True)
print(torch.autograd.gradcheck(Lin.apply, (xd, wd, bd)))
""",
}


@pytest.mark.parametrize("name", CUSTOM_FUNCTIONS)
def test_custom_functions(name: str) -> None:
    assert_true_to_torch(CUSTOM_FUNCTIONS[name])


@pytest.mark.parametrize("name", SAVED_TENSOR_HOOKS)
def test_saved_tensor_hooks(name: str) -> None:
    assert_true_to_torch(SAVED_TENSOR_HOOKS[name])


@pytest.mark.parametrize("name", SUBCLASSES_AND_MODES)
def test_subclasses_and_modes(name: str) -> None:
    assert_true_to_torch(SUBCLASSES_AND_MODES[name])


@pytest.mark.parametrize("name", HIGHER_ORDER)
def test_higher_order_gradients(name: str) -> None:
    assert_true_to_torch(HIGHER_ORDER[name])


# A storage met through tensors of two dtypes (a complex tensor and its real view, both in the graph or
# among a backward pass's gradients): its fact is written in the dtype of the first tensor met on it.
MIXED_DTYPES = {
    "complex autograd: .real of a product with the conjugate": """
x = torch.randn(3, dtype=torch.cfloat, requires_grad=True)
y = (x * x.conj()).real.sum()
y.backward()
print(torch.allclose(x.grad, 2 * x), x.grad.dtype)
""",
    "view_as_real, .imag and abs of complex, trained a step": """
z = torch.randn(2, dtype=torch.cfloat, requires_grad=True)
opt = torch.optim.SGD([z], lr=0.1)
r = torch.view_as_real(z)
loss = r.pow(2).sum() + z.imag.sum() + z.abs().sum()
loss.backward()
opt.step()
c = torch.view_as_complex(r.detach().clone())
print(z.grad.dtype, c.dtype)
""",
}


@pytest.mark.parametrize("name", MIXED_DTYPES)
def test_storages_of_two_dtypes(name: str) -> None:
    assert_true_to_torch(MIXED_DTYPES[name])


# Anomaly mode prints the stack of the forward call that made the failing node. A script run shows
# the snippet's frames from its module down; the plain run here runs it through exec, whose frames
# above the snippet's are the test's own and are left out of the comparison.
ANOMALY = {
    "detect_anomaly, a NaN from sqrt's backward": """
with torch.autograd.detect_anomaly():
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    y = x.sqrt()
    z = (y * 0).sum()
    z.backward()
print(x.grad)
""",
    "set_detect_anomaly, the failing op in a function and a module": """
torch.autograd.set_detect_anomaly(True)
class Ratio(nn.Module):
    def forward(self, t):
        return ratio(t)
def ratio(t):
    return t / t
x = torch.tensor([0.0, 1.0], requires_grad=True)
y = Ratio()(x)
y.sum().backward()
""",
    "double backward: the node of the first pass that induced the failing one": """
torch.autograd.set_detect_anomaly(True)
x = torch.tensor([0.0, 1.0], requires_grad=True)
y = x.pow(3).sum()
(g,) = torch.autograd.grad(y, x, create_graph=True)
h = g.sqrt().sum()
h.backward()
""",
    "a Python-written torch function, then an in-place error": """
torch.autograd.set_detect_anomaly(True)
x = torch.tensor([0.5, 1.0], requires_grad=True)
y = F.softmax(x, dim=0)
z = y.exp()
y.mul_(2)
z.sum().backward()
""",
}

_ABOVE_THE_SNIPPET = re.compile(
    r'(forward call that (?:caused the error|induced the previous calculation):\n)'
    r'((?:  File "(?!<snippet>)[^\n]*\n(?:    [^\n]*\n)?)+)')


def _as_a_script(text: str) -> str:
    return _ABOVE_THE_SNIPPET.sub(r"\1", text)


@pytest.fixture
def anomaly_mode_restored():
    """``set_detect_anomaly(True)`` is the process's, and the plain run's stays on: turned off after."""
    yield
    torch.autograd.set_detect_anomaly(False)


@pytest.mark.usefixtures("anomaly_mode_restored")
@pytest.mark.parametrize("name", ANOMALY)
def test_anomaly_mode_shows_the_snippets_stack(name: str) -> None:
    source = ANOMALY[name].strip("\n") + "\n"
    result = trace(source)
    plain = run_plain(source)
    printed = result["steps"][-1]["stdout"] + ((result["error"] or {}).get("output") or "")
    assert "forward call that caused the error:\n  File \"<snippet>\"" in printed
    assert printed == _as_a_script(plain.stdout)
    _assert_same(source)
