"""Training-script idioms: a context chosen by device (``nullcontext`` or autocast), a config as a
``SimpleNamespace``, a weak reference that says a tensor was freed, numpy's submodules imported by
name, elapsed time as a ``timedelta``, the performance recipes' backend checks."""

from __future__ import annotations

from tutorial_registry import snippet

snippet("nullcontext-amp", """\
from contextlib import nullcontext, suppress, ExitStack, contextmanager
device_type = "cuda" if torch.cuda.is_available() else "cpu"
ptdtype = torch.bfloat16
ctx = (nullcontext() if device_type == "cpu"
       else torch.amp.autocast(device_type=device_type, dtype=ptdtype))
model = nn.Linear(4, 2)
with ctx:
    logits = model(torch.ones(3, 4))
print(device_type, logits.dtype)
with suppress(ZeroDivisionError):
    1 / 0
@contextmanager
def evaluating(m):
    was = m.training
    m.eval()
    try:
        yield m
    finally:
        m.train(was)
with evaluating(model) as m:
    print(m.training)
print(model.training)
with ExitStack() as stack:
    stack.enter_context(torch.no_grad())
    stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
    y = model(torch.ones(1, 4))
print(y.dtype, y.requires_grad)
""")

snippet("config-namespace", """\
from types import SimpleNamespace
import datetime
import time
args = SimpleNamespace(lr=0.1, epochs=3, batch_size=4, seed=0)
print(args)
args.lr *= 0.5
print(args.lr, getattr(args, "momentum", 0.9))
torch.manual_seed(args.seed)
model = nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=args.lr)
start = time.time()
for epoch in range(args.epochs):
    opt.zero_grad()
    loss = model(torch.ones(args.batch_size, 2)).pow(2).mean()
    loss.backward()
    opt.step()
elapsed = datetime.timedelta(seconds=round(time.time() - start))
print(f"{args.epochs} epochs in {elapsed}", str(datetime.timedelta(seconds=3725)))
print(datetime.date(2024, 1, 31) + datetime.timedelta(days=1))
""")

snippet("weakref-freed", """\
import weakref
import gc
t = torch.ones(1000)
r = weakref.ref(t)
print(r() is t)
del t
print(r() is None)
x = torch.ones(3, requires_grad=True)
y = x.exp()
node = y.grad_fn
fin = []
weakref.finalize(y, fin.append, "y freed")
del y
gc.collect()
print(fin, node.name())
cache = weakref.WeakValueDictionary()
m = nn.Linear(2, 2)
cache["m"] = m
print(len(cache))
del m
print(len(cache))
""")

snippet("numpy-submodules", """\
import numpy as np
import numpy.random as npr
from numpy import linalg as LA
import numpy.fft
npr.seed(0)
a = npr.rand(3, 3)
print(a.round(4))
print(round(float(LA.det(a)), 4), LA.norm(np.eye(2)))
print(np.abs(numpy.fft.rfft(np.array([1.0, 0.0, -1.0, 0.0]))))
rng = np.random.default_rng(42)
print(rng.integers(0, 10, 5), torch.from_numpy(rng.standard_normal(2)).dtype)
import cmath
from fractions import Fraction
print(cmath.sqrt(-4), Fraction(3, 6), round(cmath.exp(1j * cmath.pi).real))
""")

snippet("backend-checks", """\
print(torch.backends.mkldnn.is_available() in (True, False),
      torch.backends.openmp.is_available() in (True, False))
print(torch.backends.mps.is_available(), torch.backends.cuda.is_built() in (True, False),
      torch.cuda.device_count())
print(torch.get_default_dtype(), torch.get_default_device(), torch.version.cuda)
print(torch.cuda.is_available(), torch.accelerator.is_available() if hasattr(torch, "accelerator") else False)
""")
