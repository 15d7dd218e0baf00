"""No observer effect (issue 2 §4): tracing must not change what the snippet does or how long its
objects live.

The snippets below carry their own witnesses: a ``Probe`` whose ``__del__`` prints, hung on a tensor
(tensors accept attributes), so the moment each tensor is freed shows up in the printed output, which
must equal a plain run's output exactly. Tracing with a strong reference anywhere (a dict of tensors,
a kept graph node, a saved frame) would move or drop a "freed" line.
"""

from __future__ import annotations

import builtins
import gc
import weakref
from typing import Any

import pytest
from torch_oracle import assert_same_as_plain, run_plain, step_after, trace

from app.engine import EngineLimits, trace_snippet

PROBE = """\
class Probe:
    def __init__(self, name):
        self.name = name
    def __del__(self):
        print('freed', self.name)
"""
PROBE_LINES = PROBE.count("\n")


def _with_probe(body: str) -> str:
    return PROBE + body


def test_del_frees_a_tensor_at_once() -> None:
    source = _with_probe("""\
x = torch.ones(3)
x.probe = Probe('x')
y = x * 2
y.probe = Probe('y')
del x
print('after del x')
y = None
print('after rebinding y')
""")
    result = assert_same_as_plain(source)
    assert result["steps"][-1]["stdout"] == "freed x\nafter del x\nfreed y\nafter rebinding y\n"
    at_del = step_after(result, PROBE_LINES + 5)
    assert at_del["stdout"].endswith("freed x\n")
    assert "x" not in at_del["variables"] and len(at_del["tensors"]) == 1


def test_a_graph_keeps_its_saved_tensors_exactly_as_long_as_torch_does() -> None:
    source = _with_probe("""\
a = torch.ones(3, requires_grad=True)
a.probe = Probe('a')
h = a * a
h.probe = Probe('h')
loss = h.sum()
del a, h
print('names gone')
loss.backward()
print('backward done')
del loss
print('graph gone')
""")
    plain = run_plain(source)
    # The plain run itself shows what the product teaches: the graph, not the name, keeps `a` alive.
    assert plain.stdout == "freed h\nnames gone\nbackward done\nfreed a\ngraph gone\n"
    result = assert_same_as_plain(source)
    names_gone = step_after(result, PROBE_LINES + 6)
    assert len(names_gone["tensors"]) == 2  # loss and `a`, which the graph still holds
    assert step_after(result, PROBE_LINES + 10)["tensors"] == {}


def test_locals_of_a_function_are_freed_when_the_function_frees_them() -> None:
    source = _with_probe("""\
def f():
    t = torch.ones(2)
    t.probe = Probe('t')
    del t
    print('in f after del')
    u = torch.zeros(1)
    u.probe = Probe('u')
    return 1

f()
print('done')
""")
    result = assert_same_as_plain(source)
    assert result["steps"][-1]["stdout"] == "freed t\nin f after del\nfreed u\ndone\n"


def test_a_weak_reference_in_the_snippet_sees_the_tensor_die() -> None:
    source = """\
import weakref
x = torch.ones(3, requires_grad=True)
y = (x * 2).sum()
r = weakref.ref(x)
del x
print(r() is None)
del y
print(r() is None)
"""
    result = assert_same_as_plain(source)
    # x survives its name (y's graph holds it) and dies with the graph, traced or not.
    assert result["steps"][-1]["stdout"] == "False\nTrue\n"


def test_nothing_the_snippet_made_outlives_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    refs: list[weakref.ref[Any]] = []
    names = dict(vars(builtins))
    names["watch"] = lambda obj: refs.append(weakref.ref(obj)) or obj  # the test's own witness
    source = _with_probe("""\
w = watch(torch.ones(2, requires_grad=True))
w.probe = Probe('w')
loss = watch((w * w).sum())
losses = [loss]
loss.backward()
model = watch(nn.Linear(2, 2))
def keep():
    return losses
""")
    result = trace_snippet(source, EngineLimits(), builtins_namespace=names)
    assert result["ok"], result["error"]
    assert len(refs) == 3
    assert [r() for r in refs] == [None, None, None]  # freed by reference counting, no gc needed
    # The snippet's objects were freed while its output was still captured: nothing leaked out.
    assert capsys.readouterr().out == ""


def test_the_engine_keeps_no_strong_reference_between_steps() -> None:
    gc.collect()
    source = "x = torch.ones(5, 5) * 3\ny = x.t()\nz = y.sum()\n"
    result = trace(source)
    assert result["ok"]
    leftovers = [o for o in gc.get_objects() if type(o).__name__ == "Tensor" and getattr(o, "shape", None)
                 == (5, 5) and bool((o == 3).all())]
    assert leftovers == []


@pytest.mark.parametrize(
    "source",
    [
        # Versions, values and grads after in-place work, views and .data: as a plain run has them.
        """\
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
v = x.detach()[1:]
v.mul_(10)
d = x.data
d[0] = -1
y = (x * x).sum()
y.backward()
with torch.no_grad():
    x -= 0.1 * x.grad
print(x, x._version, d._version)
""",
        # Random numbers: tracing draws none of its own.
        """\
a = torch.randn(3)
b = torch.rand(2, 2)
idx = torch.randperm(5)
print(a.sum().item(), torch.randn(1).item())
""",
        # Grad-mode state leaves each line exactly as the snippet set it.
        """\
x = torch.ones(2, requires_grad=True)
torch.set_grad_enabled(False)
y = x * 2
torch.set_grad_enabled(True)
z = x * 2
print(y.requires_grad, z.requires_grad, torch.is_grad_enabled())
""",
    ],
)
def test_results_equal_a_plain_run(source: str) -> None:
    assert_same_as_plain(source)


def test_a_tensor_subclass_runs_no_user_code_when_the_engine_reads_it() -> None:
    source = """\
class Loud(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        print('torch_function', getattr(func, '__name__', '?'))
        return super().__torch_function__(func, types, args, kwargs or {})

t = torch.ones(2).as_subclass(Loud)
n = 1
"""
    result = assert_same_as_plain(source)
    assert result["steps"][-1]["stdout"] == run_plain(source).stdout


def test_saved_tensor_hooks_run_only_when_torch_runs_them() -> None:
    source = """\
def pack(t):
    print('pack', t.tolist())
    return t * 10

def unpack(p):
    print('unpack', p.tolist())
    return p / 10

x = torch.tensor([1.0, 2.0], requires_grad=True)
with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    y = (x * x).sum()
y.backward()
"""
    result = assert_same_as_plain(source)
    # Before backward, the graph holds what pack returned, and the snapshot shows exactly that.
    step = step_after(result, 11)
    square = step["nodes"][step["nodes"][step["tensors"][step["variables"]["y"]]["grad_fn"]]["next"][0]]
    packed = step["tensors"][square["saved"]["self"]]
    assert packed["values"] == [10.0, 20.0]
