"""Writes torch makes that no name announces (issue 24 §1): the step after a call shows what the call
wrote — by the op's schema, the writes the schemas leave out (batch-norm running statistics, updated
without a version bump), and the versions a call written in Python moved (``F.embedding``'s renorm,
in-place activations) — checked at every step against a plain run paused at the same moments, and
incremental snapshots against whole ones."""

from __future__ import annotations

import pytest
import torch
from torch_oracle import assert_steps_match_plain

from app.engine.writes import UNDECLARED, WRITES, plan_of
from tests.engine.test_engine_incremental import _assert_same


def _schema_names(op: str) -> list[list[str]]:
    packet = getattr(torch.ops.aten, op)
    return [[a.name for a in getattr(packet, o)._schema.arguments] for o in packet.overloads()]


@pytest.mark.parametrize("op", sorted(UNDECLARED))
def test_each_undeclared_write_names_arguments_of_its_op(op: str) -> None:
    written, flag = UNDECLARED[op]
    assert any(flag in names and set(written) <= set(names) for names in _schema_names(op))


def _stats() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(3), torch.ones(3)


# The entries torch runs on the CPU, called as the snippet would: (op, the call, whether the version
# stays: what makes the table necessary — a write with a version bump is also seen by the versions).
CPU_CALLS = {
    "batch_norm": (lambda x, m, v: torch.batch_norm(x, None, None, m, v, True, 0.5, 1e-5, False), True),
    "native_batch_norm": (
        lambda x, m, v: torch.native_batch_norm(x, None, None, m, v, True, 0.5, 1e-5), True),
    "_batch_norm_impl_index": (
        lambda x, m, v: torch._batch_norm_impl_index(x, None, None, m, v, True, 0.5, 1e-5, False), True),
    "instance_norm": (
        lambda x, m, v: torch.instance_norm(x.unsqueeze(0).transpose(1, 2), None, None, m, v, True, 0.5,
                                            1e-5, False), False),
}


@pytest.mark.parametrize("op", sorted(CPU_CALLS))
def test_torch_writes_what_the_table_says(op: str) -> None:
    call, version_stays = CPU_CALLS[op]
    mean, var = _stats()
    call(torch.randn(4, 3), mean, var)
    assert not torch.equal(mean, torch.zeros(3)) and not torch.equal(var, torch.ones(3))
    assert (mean._version == 0) == version_stays
    # ... and the same call in eval mode (the flag false) writes nothing
    mean, var = _stats()
    torch.batch_norm(torch.randn(4, 3), None, None, mean, var, False, 0.5, 1e-5, False)
    assert torch.equal(mean, torch.zeros(3))


def test_plans_follow_the_schema_not_the_name() -> None:
    legit = plan_of(torch._native_batch_norm_legit)  # no trailing _, yet Tensor(a!) running_mean
    assert legit.kind == WRITES and {3, 4} <= legit.positions
    addcdiv = plan_of(torch.Tensor.addcdiv_)  # in place on self only: exp_avg and denom are read
    assert addcdiv.positions == {0} and not addcdiv.all_args
    fused = plan_of(torch._fused_adam_)  # parameters, grads and both moments
    assert {0, 1, 2, 3, 4} <= fused.positions and 5 not in fused.positions
    functional = plan_of(torch.nn.functional.batch_norm)  # Python: by its signature, and versions
    assert functional.versions
    assert {(1, "running_mean"), (2, "running_var")} <= {entry[:2] for entry in functional.flagged}


SCENARIOS = {
    "batch norm modules in training": """
bn = nn.BatchNorm1d(3)
x = torch.randn(4, 3)
out = bn(x)
snap = bn.running_mean.clone()
out = bn(x * 2)
bn2 = nn.BatchNorm2d(2, momentum=None)
for i in range(2):
    y = bn2(torch.randn(2, 2, 2, 2) + i)
bn3 = nn.BatchNorm3d(2)
z = bn3(torch.randn(2, 2, 2, 2, 2))
bn.eval()
out = bn(x)
""",
    "batch norm called as functions": """
x = torch.randn(4, 3, requires_grad=True)
rm, rv = torch.zeros(3), torch.ones(3)
y = F.batch_norm(x, rm, rv, training=True, momentum=0.5)
y2 = F.batch_norm(x, running_var=rv, running_mean=rm, training=True)
y3 = F.batch_norm(x, rm, rv, None, None, False)
y.sum().backward()
b = torch.batch_norm(x.detach(), None, None, rm, rv, True, 0.1, 1e-5, False)
m2, v2 = torch.zeros(3), torch.ones(3)
out, save_mean, save_invstd = torch.native_batch_norm(x.detach(), None, None, m2, v2, True, 0.5, 1e-5)
m3, v3 = torch.zeros(3), torch.ones(3)
legit = torch._native_batch_norm_legit(x.detach(), None, None, m3, v3, True, 0.5, 1e-5)
""",
    "instance norm with running statistics": """
m = nn.InstanceNorm1d(2, track_running_stats=True)
x = torch.randn(3, 2, 5)
y = m(x)
rm = torch.zeros(2)
rv = torch.ones(2)
z = F.instance_norm(x, rm, rv, use_input_stats=True, momentum=0.3)
m2 = nn.InstanceNorm2d(2, track_running_stats=True, affine=True)
w = m2(torch.randn(2, 2, 3, 3))
""",
    "embedding renormed by max_norm": """
emb = nn.Embedding(6, 3, max_norm=1.0)
idx = torch.tensor([0, 2, 2, 5])
out = emb(idx)
weight = torch.randn(6, 3) * 3
e2 = F.embedding(idx, weight, max_norm=0.5)
bag = nn.EmbeddingBag(5, 2, max_norm=0.5, mode="sum")
o3 = bag(torch.tensor([0, 1, 1, 4]), torch.tensor([0, 2]))
""",
    "in-place activations by position and in inference mode": """
a = torch.randn(6)
b = nn.LeakyReLU(0.2, inplace=True)(a)
c = torch.randn(6)
F.elu(c, 1.0, True)
d = torch.ones(8)
nn.Dropout(0.5, inplace=True)(d)
f, g = torch.randn(2, 3), torch.zeros(2, 3)
F.normalize(f, dim=1, out=g)
with torch.inference_mode():
    h = torch.randn(5)
    F.leaky_relu(h, 0.1, True)
    bn = nn.BatchNorm1d(5)
    bn(torch.randn(3, 5))
""",
    "fused and foreach optimizers held in a list, batch norm in functional_call": """
ps = [torch.randn(3, requires_grad=True) for _ in range(2)]
opts = [torch.optim.Adagrad(ps, lr=0.1, fused=True), torch.optim.RMSprop(ps, lr=0.01, foreach=True),
        torch.optim.NAdam(ps, foreach=False), torch.optim.AdamW(ps, fused=True),
        torch.optim.SGD(ps, lr=0.1, momentum=0.9, fused=True)]
for step in range(2):
    loss = sum((p * p).sum() for p in ps)
    for o in opts:
        o.zero_grad()
    loss.backward()
    for o in opts:
        o.step()
from torch.func import functional_call
bn = nn.BatchNorm1d(2)
bufs = {"running_mean": torch.zeros(2), "running_var": torch.ones(2), "num_batches_tracked": torch.tensor(0)}
out = functional_call(bn, {**dict(bn.named_parameters()), **bufs}, (torch.randn(5, 2),))
lazy = nn.LazyBatchNorm1d()
z = lazy(torch.randn(4, 2))
o = torch.batch_norm(torch.randn(4, 2), None, None, bufs["running_mean"], bufs["running_var"], True, 0.5,
                     1e-5, False)
""",
    "a CNN with batch norm trained through a DataLoader": """
from torch.utils.data import DataLoader, TensorDataset
X = torch.randn(16, 1, 6, 6)
Y = torch.randint(0, 3, (16,))
loader = DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True)
model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(8, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for xb, yb in loader:
    opt.zero_grad()
    loss = F.cross_entropy(model(xb), yb)
    loss.backward()
    opt.step()
model.eval()
with torch.no_grad():
    pred = model(X[:4]).argmax(1)
""",
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_step_shows_what_torch_wrote(name: str) -> None:
    source = SCENARIOS[name].strip("\n") + "\n"
    result = assert_steps_match_plain(source)
    assert result["ok"], result["error"]
    _assert_same(source)
