"""torch.profiler's ``with_stack=True`` puts its own C profile function in place of any other while it
records; the engine's, which notes hook registrations while a snippet that mentions hooks runs, was
taken out and put back around each step's reading by whatever ``sys.getprofile()`` answered — the
profiler's context object, which Python then called as a profile function: "'TraceContext' object is
not callable" at the next line. The engine now leaves a profile function it did not set alone. Plain
torch is the oracle."""

from __future__ import annotations

import pytest
from torch_oracle import assert_same_as_plain

PROFILED = """\
from torch.profiler import profile, ProfilerActivity
model = nn.Linear(4, 2)
def hook(g):
    return g * 2
with profile(activities=[ProfilerActivity.CPU], with_stack={stack}) as prof:
    x = torch.ones(3, 4, requires_grad=True)
    x.register_hook(hook)
    y = model(x).sum()
    y.backward()
keys = sorted({{e.key for e in prof.key_averages()}})
print([k for k in keys if k in ("aten::addmm", "aten::sum", "aten::mul")])
print(x.grad)
z = (x * 3).sum()
z.backward()
print(x.grad[0])
"""


@pytest.mark.parametrize("stack", [True, False], ids=["with-stack", "without-stack"])
def test_a_profiled_run_with_hooks_runs_as_in_plain_torch(stack: bool) -> None:
    assert_same_as_plain(PROFILED.format(stack=stack))
