"""Round 3 (issue 24), continued: quantized tensors and dynamic quantization, every dtype, device
contexts and meta initialisation, stderr and logging, print options, programs in functions with
``global`` and ``nonlocal``, old-style spectral and weight norm hooks, batch norm over views of one
buffer, rarely met optimizers, in-place ops without a trailing name, samplers and collate functions,
AMP's ``custom_fwd``, checkpointing with dropout and selective policies, torch.func transforms
(``linearize``, ``vjp`` with ``has_aux``, ``jacfwd`` over a module, vmap randomness) and a
functional training loop; each held to torch by ``assert_true_to_torch``.

Found wrong here, and fixed: on cuda mapped to the CPU, the simulation read ``grad_fn`` and
``is_leaf`` of every tensor it met, and a multi-output view written through its base (torch refuses
both) failed the run.
"""

from __future__ import annotations

import pytest
from torch_oracle import assert_values, resolve, run_plain, trace

from tests.engine.test_engine_real_code import assert_true_to_torch

RUNTIME = {
    "quantized tensors and dynamic quantization of a model": """
x = torch.randn(2, 3)
q = torch.quantize_per_tensor(x, 0.1, 0, torch.qint8)
print(q)
dq = q.dequantize()
qc = torch.quantize_per_channel(x, torch.tensor([0.1, 0.2]), torch.tensor([0, 1]), 0, torch.quint8)
ir = q.int_repr()
model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
qmodel = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
out = qmodel(x)
print(qmodel)
""",
    "dtypes: float8, unsigned, half complex, bool and bits": """
a = torch.tensor([1.5, -2.0, 300.0]).to(torch.float8_e4m3fn)
b = torch.tensor([1, 2, 3], dtype=torch.uint16)
c = torch.tensor([1 + 2j], dtype=torch.complex32)
d = torch.tensor([True, False])
e = torch.arange(4, dtype=torch.uint64)
f = torch.tensor([0.1, 0.2], dtype=torch.float16)
g = torch.tensor([3], dtype=torch.int8).view(torch.uint8)
h = a.float()
print(a, b, d, e, f, g, h)
""",
    "device context manager, default device, meta init then to_empty": """
with torch.device("meta"):
    big = nn.Linear(3, 3)
shape = big.weight.shape
torch.set_default_device("cpu")
x = torch.ones(2)
real = big.to_empty(device="cpu"); nn.init.ones_(real.weight); nn.init.zeros_(real.bias)  # noqa: E702
y = real(torch.ones(1, 3))
with torch.device("cpu"):
    z = torch.zeros(2, requires_grad=True)
(z * 2).sum().backward()
torch.set_default_device(None)
""",
    "stderr, logging and sys.stdout.write from the snippet": """
import sys, logging
print("to err", file=sys.stderr)
sys.stdout.write("raw\\n")
log = logging.getLogger("train")
handler = logging.StreamHandler(sys.stdout)
handler.setFormatter(logging.Formatter("%(levelname)s %(name)s:%(lineno)d %(message)s"))
log.addHandler(handler)
log.setLevel(logging.INFO)
x = torch.randn(2, requires_grad=True)
for i in range(2):
    loss = (x * i).sum()
    log.info("step %d loss %.3f", i, loss.item())
print("a", "b", sep="-", end="!\\n")
log.removeHandler(handler)
""",
    "printoptions set and restored": """
imgs = torch.randn(2, 3)
torch.set_printoptions(precision=2)
print(torch.tensor([1.23456, 2.5]))
torch.set_printoptions(profile="default")
print(torch.tensor([1.23456, 2.5]))
""",
    "a main function with nested helpers, globals and nonlocal": """
counter = 0
def make_model():
    return nn.Sequential(nn.Linear(2, 2), nn.Tanh())
def train(model, steps):
    global counter
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    def step():
        nonlocal history
        loss = model(torch.ones(1, 2)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        history = history + [loss.detach()]
    for _ in range(steps):
        step()
        counter += 1
    return history
def main():
    model = make_model()
    hist = train(model, 2)
    return model, hist
if __name__ == "__main__":
    model, hist = main()
print(counter, len(hist))
""",
    "samplers: weighted random, subset random, batch sampler, a custom collate_fn padding": """
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler
from torch.utils.data import SubsetRandomSampler, BatchSampler
from torch.nn.utils.rnn import pad_sequence
ds = TensorDataset(torch.arange(6.), torch.tensor([0, 0, 0, 1, 1, 1]))
w = WeightedRandomSampler([0.1, 0.1, 0.1, 1.0, 1.0, 1.0], num_samples=4, replacement=True)
print([y.tolist() for _, y in DataLoader(ds, batch_size=2, sampler=w)])
print([x.tolist() for x, _ in DataLoader(ds, batch_size=2, sampler=SubsetRandomSampler([0, 2, 4]))])
bs = BatchSampler(range(6), batch_size=4, drop_last=False)
print([x.tolist() for x, _ in DataLoader(ds, batch_sampler=bs)])
seqs = [torch.ones(n) for n in (1, 3, 2)]
def collate(batch):
    return pad_sequence(batch, batch_first=True), torch.tensor([len(b) for b in batch])
padded, lens = next(iter(DataLoader(seqs, batch_size=3, collate_fn=collate)))
""",
}

LAYERS_AND_OPTIMIZERS = {
    "old-style spectral_norm and weight_norm hooks, trained": """
lin = nn.utils.spectral_norm(nn.Linear(3, 2))
u = lin.weight_u
x = torch.randn(4, 3)
for i in range(2):
    out = lin(x)
    loss = out.pow(2).sum()
    loss.backward()
w = lin.weight
wn = nn.utils.weight_norm(nn.Linear(3, 2))
g = wn.weight_g
y = wn(x).sum()
y.backward()
""",
    "batch norm with running stats that are views of one buffer, and rrelu": """
stats = torch.zeros(2, 3)
stats[1] = 1.0
x = torch.randn(4, 3)
y = F.batch_norm(x, stats[0], stats[1], training=True, momentum=0.5)
z = F.batch_norm(x, stats[0], stats[1], training=True)
buf = torch.ones(6)
m = F.batch_norm(x, buf[:3], buf[3:], training=True)
r = nn.RReLU()
a = r(torch.randn(5))
t = torch.randn(5)
F.rrelu(t, training=True, inplace=True)
""",
    "optimizers rarely met: Rprop, ASGD, Adadelta, Adam capturable and maximize": """
net = nn.Linear(2, 2)
opts = [torch.optim.Rprop(net.parameters()), torch.optim.ASGD(net.parameters(), t0=1),
        torch.optim.Adadelta(net.parameters()), torch.optim.Adam(net.parameters(), maximize=True),
        torch.optim.SGD(net.parameters(), lr=0.1, dampening=0.5, momentum=0.5)]
x = torch.randn(3, 2)
for opt in opts:
    for i in range(2):
        opt.zero_grad()
        net(x).pow(2).sum().backward()
        opt.step()
ax = opts[1].state[net.weight]["ax"]
sd = opts[0].state[net.bias]["step_size"]
""",
    "share_memory_, resize_as_, put_, index_fill_, masked_scatter_": """
a = torch.zeros(4)
a.share_memory_()
b = torch.zeros(1)
b.resize_as_(torch.ones(2, 2)).zero_()
c = torch.zeros(5)
c.put_(torch.tensor([0, 4]), torch.tensor([1.0, 2.0]))
c.index_fill_(0, torch.tensor([1]), 7.0)
d = torch.zeros(4)
d.masked_scatter_(torch.tensor([True, False, True, False]), torch.tensor([5.0, 6.0]))
net = nn.Linear(2, 2)
net.share_memory()
""",
}

TRANSFORMS = {
    "custom_fwd and custom_bwd under autocast, autocast state read": """
class MyMM(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a.mm(b)
    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g.mm(b.t()), a.t().mm(g)
a = torch.randn(2, 3, requires_grad=True)
b = torch.randn(3, 2, requires_grad=True)
with torch.autocast("cpu"):
    print(torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
    c = MyMM.apply(a, b)
    d = a.mm(b)
    with torch.autocast("cpu", enabled=False):
        e = a.mm(b)
(c.sum() + d.float().sum() + e.sum()).backward()
""",
    "checkpoint with dropout and rng preserved, selective context_fn, determinism check": """
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts, CheckpointPolicy
drop = nn.Dropout(0.5)
lin = nn.Linear(4, 4)
def block(t):
    return drop(lin(t)).relu()
x = torch.randn(2, 4, requires_grad=True)
y = checkpoint(block, x, use_reentrant=False, preserve_rng_state=True)
y.sum().backward()
g1 = x.grad.clone()
x.grad = None
y2 = checkpoint(block, x, use_reentrant=True)
y2.sum().backward()
def policy(ctx, op, *args, **kwargs):
    saved = op == torch.ops.aten.mm.default
    return CheckpointPolicy.MUST_SAVE if saved else CheckpointPolicy.PREFER_RECOMPUTE
ctx_fn = lambda: create_selective_checkpoint_contexts(policy)
z = checkpoint(lambda t: (t @ t.t()).sin().sum(), x, use_reentrant=False, context_fn=ctx_fn)
z.backward()
""",
    "torch.func: linearize, vjp with has_aux, jacfwd over a module, vmap randomness and chunks": """
from torch.func import linearize, vjp, jacfwd, vmap, functional_call
x = torch.randn(3)
out, jvp_fn = linearize(torch.sin, x)
t = jvp_fn(torch.ones(3))
o, fn, aux = vjp(lambda a: (a.exp().sum(), a.mean()), x, has_aux=True)
(gx,) = fn(torch.tensor(1.0))
net = nn.Linear(3, 2)
params = dict(net.named_parameters())
J = jacfwd(lambda p, inp: functional_call(net, p, (inp,)), argnums=1)(params, x)
r = vmap(lambda a: F.dropout(a, 0.5, training=True), randomness="different")(torch.ones(2, 3))
s = vmap(lambda a: F.dropout(a, 0.5, training=True), randomness="same")(torch.ones(2, 3))
c = vmap(torch.outer, in_dims=(0, None), chunk_size=1)(torch.randn(2, 3), x)
""",
    "torch.func.grad of a training step, params updated functionally in a loop": """
from torch.func import grad, functional_call
net = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
params = {k: v.detach().clone() for k, v in net.named_parameters()}
x = torch.randn(4, 2)
y = torch.randn(4, 1)
def loss_fn(p):
    return F.mse_loss(functional_call(net, p, (x,)), y)
for step in range(3):
    grads = grad(loss_fn)(params)
    params = {k: p - 0.1 * grads[k] for k, p in params.items()}
final = loss_fn(params)
""",
}


@pytest.mark.parametrize("name", RUNTIME)
def test_runtime(name: str) -> None:
    assert_true_to_torch(RUNTIME[name])


@pytest.mark.parametrize("name", LAYERS_AND_OPTIMIZERS)
def test_layers_and_optimizers(name: str) -> None:
    assert_true_to_torch(LAYERS_AND_OPTIMIZERS[name])


@pytest.mark.parametrize("name", TRANSFORMS)
def test_transforms(name: str) -> None:
    assert_true_to_torch(TRANSFORMS[name])


def test_a_multi_output_view_written_through_its_base_on_the_simulated_gpu() -> None:
    """``unbind``'s output whose base was then written in place (torch refuses its ``grad_fn`` and
    ``is_leaf``) on cuda mapped to the CPU: the simulation's own reads of its node and leaf-ness
    failed the run (a backward pass asks every tensor on the device whether its ``.grad`` is one)."""
    source = """
x = torch.arange(6.).reshape(2, 3).cuda().requires_grad_()
y = x * 2
u = y.unbind(0)[1]
y.add_(1)
y.sum().backward()
print(x.grad.device, u.device, u.detach().sum().item())
"""
    result = trace(source.lstrip("\n"), cuda_on_cpu=True)
    assert result["ok"], result["error"]
    last = result["steps"][-1]
    assert last["stdout"] == "cuda:0 cuda:0 27.0\n"
    u = last["tensors"][last["variables"]["u"]]
    assert u["grad_fn"] is None and u["unavailable"]["grad_fn"].startswith("Output 1 of Unbind is a view")
    assert (u["device"], u["values"]) == ("cuda:0", [7.0, 9.0, 11.0])


GPU_RECURRENT = {
    "a GRU forward and backward": """
gru = nn.GRU(3, 2).cuda()
x = torch.randn(3, 2, 3, device="cuda")
out, h = gru(x)
loss = out.sum()
loss.backward()
""",
    "a GRU cell unrolled, trained a step": """
cell = nn.GRUCell(3, 2).to("cuda")
opt = torch.optim.SGD(cell.parameters(), lr=0.1)
x = torch.randn(3, 2, 3).cuda()
h = torch.zeros(2, 2, device="cuda")
for t in range(3):
    h = cell(x[t], h)
loss = h.pow(2).sum()
loss.backward()
opt.step()
""",
}


@pytest.mark.parametrize("name", GPU_RECURRENT)
def test_tensors_an_op_makes_inside_itself_are_on_the_simulated_gpu(name: str) -> None:
    """A GRU's saved copies are made in C++ inside its op: on cuda mapped to the CPU their device was
    decided when first read — from memory they share with a result, freed by a backward pass — so
    the incremental snapshot (which first reads them in the pass) said ``cpu`` where the whole one
    said ``cuda:0``. On a GPU every tensor of this code is on the GPU."""
    source = GPU_RECURRENT[name].lstrip("\n")
    incremental, whole = (trace(source, cuda_on_cpu=True, full_snapshots=full) for full in (False, True))
    assert incremental["ok"], incremental["error"]
    assert incremental["steps"] == whole["steps"]
    shown = {fact["device"] for step in incremental["steps"] for fact in step["tensors"].values()}
    assert shown == {"cuda:0"}


GPU_FUNC = """
from torch.func import grad, vmap, jacrev, functional_call
model = nn.Linear(3, 1).to(device)
params = {k: v.detach() for k, v in model.named_parameters()}
x = torch.randn(4, 3, device=device)
y = torch.randn(4, 1, device=device)
def loss_fn(p, xi, yi):
    return F.mse_loss(functional_call(model, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))
per_sample = vmap(grad(loss_fn), in_dims=(None, 0, 0))(params, x, y)
gw = per_sample["weight"]
j = jacrev(lambda t: t.sin() * 2)(x[0])
print(gw.shape, gw.device.type, j.device.type)
"""


def test_torch_func_transforms_on_the_simulated_gpu() -> None:
    """torch.func's wrappers (``grad``'s, ``vmap``'s batched tensors) are made in C++ with no memory of
    their own: on cuda mapped to the CPU they were taken for CPU tensors, and the first op mixing one
    with a parameter failed ("Expected all tensors to be on the same device"). They are on the
    device of what they wrap; the numbers are the CPU run's."""
    source = GPU_FUNC.lstrip("\n")
    result = trace('device = "cuda"\n' + source, cuda_on_cpu=True)
    assert result["ok"], result["error"]
    plain = run_plain('device = "cpu"\n' + source)
    last = result["steps"][-1]
    assert plain.stdout == "torch.Size([4, 1, 3]) cpu cpu\n"
    assert last["stdout"] == "torch.Size([4, 1, 3]) cuda cuda\n"
    for label in ("gw", "j", "x"):
        fact = last["tensors"][last["variables"][label]]
        assert fact["device"] == "cuda:0", label
        assert_values(fact["values"], resolve(plain.namespace, label))
    whole = trace('device = "cuda"\n' + source, cuda_on_cpu=True, full_snapshots=True)
    assert result["steps"] == whole["steps"]
