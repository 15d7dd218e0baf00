"""The memory view's groups say what each storage is (app/render/kinds.py), with torch as the oracle:
``named_parameters`` (and the module that owns each), ``named_buffers``, the optimizer's ``state``,
the ``.grad`` of each parameter, and what only the autograd graph keeps alive."""

from __future__ import annotations

import torch
from torch import nn

from app.render import frame_at
from app.render.kinds import NO_MODULE
from tests.render.conftest import explore, run_namespace, shown_strips, trace_v1

CODE = """\
import torch.nn.functional as F
from torch import nn
model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 1))
opt = torch.optim.Adam(model.parameters(), lr=0.1)
x, y = torch.randn(8, 3), torch.randn(8, 1)
w = torch.randn(2, requires_grad=True)
out = model(x) * w.sum()
loss = F.mse_loss(out, y)
loss.backward()
opt.step()
"""
BEFORE_BACKWARD = 8 - 1  # 0-based step after line 8: the graph holds its saved tensors


def _groups_at(view, step: int, whole) -> dict[str, tuple[str, str]]:
    """storage id -> (kind, the title of its group) at ``step``: drawn as a strip, or counted in one of
    the group's folds (``whole``: that step, whole, to find a folded member's storage)."""
    frame = frame_at(view, step)
    found = {frame.ref(strip.k): (group.name, group.title) for group, strip in shown_strips(view, step)}
    for group in view.memory.leaf_groups():
        for fam in group.families:
            for _label, tid, first, last in view.memory.folds.get(fam.fold_k, []):
                if first <= step <= last and tid is not None:
                    found.setdefault(whole.tensors[tid].storage, (group.name, group.title))
    return found


def _storage(step, name: str) -> str:
    return step.tensors[step.variables[name]].storage


def test_each_storage_is_in_the_group_torch_says_it_is() -> None:
    namespace = run_namespace(CODE)
    model, opt = namespace["model"], namespace["opt"]
    view, steps = explore(CODE), trace_v1(CODE).steps
    last = steps[-1]
    groups = _groups_at(view, view.step_count - 1, last)
    # every module's parameters open in the module's own line, their .grad in Gradients
    for name, param in model.named_parameters():
        owner = name.rpartition(".")[0]
        assert groups[_storage(last, f"model.{name}")] == ("parameter", f"model.{owner}")
        assert isinstance(param.grad, torch.Tensor)
        grad = last.tensors[last.tensors[last.variables[f"model.{name}"]].grad].storage
        assert groups[grad][0] == "gradient"
    for name, _buffer in model.named_buffers():
        assert groups[_storage(last, f"model.{name}")][0] == "buffer", name
    index = 0
    for group in opt.param_groups:  # state is numbered over param_groups, as state_dict() numbers it
        for param in group["params"]:
            for key in opt.state[param]:
                assert groups[_storage(last, f"opt.state[{index}]['{key}']")][0] == "optimizer"
            index += 1
    for name in ("x", "y"):
        assert groups[_storage(last, name)][0] == "data"
    assert groups[_storage(last, "loss")][0] == "yours"
    # a leaf that requires grad and no module keeps: a parameter, in no module's line
    assert groups[_storage(last, "w")][0] == "parameter"
    assert groups[_storage(last, "w")][1] != f"model.{NO_MODULE}"


def test_what_only_the_graph_keeps_is_held_by_the_graph() -> None:
    view, steps = explore(CODE), trace_v1(CODE).steps
    step = steps[BEFORE_BACKWARD]
    assert step.line == 8
    groups = _groups_at(view, BEFORE_BACKWARD, step)
    # what the forward pass saved: the tensors its nodes hold that no variable names
    saved = {tid for node in step.nodes.values() for tid in node.saved.values() if tid is not None}
    unnamed = {step.tensors[t].storage for t in saved} - {
        step.tensors[t].storage for t in step.variables.values() if t in step.tensors}
    assert unnamed, "the forward pass saved tensors nobody names"
    assert {groups[sid][0] for sid in unnamed} == {"graph"}
    assert {kind for kind, _ in groups.values()} >= {"parameter", "buffer", "data", "yours", "graph"}


def test_each_group_says_its_storages_and_bytes() -> None:
    view, last = explore(CODE), trace_v1(CODE).steps[-1]
    frame = frame_at(view)
    parameters = next(g for g in view.memory.groups if g.name == "parameter")
    model = run_namespace(CODE)["model"]
    count = sum(1 for _ in model.parameters()) + 1  # and w
    nbytes = sum(p.untyped_storage().nbytes() for p in model.parameters()) + 2 * 4
    assert frame.text(parameters.size_k).startswith(f"{count} storages · ")
    assert sum(last.storages[_storage(last, f"model.{n}")].nbytes for n, _ in model.named_parameters()) + \
        last.storages[_storage(last, "w")].nbytes == nbytes
    assert {p.title for p in parameters.parts} == {"model.0", "model.1", "model.3"}
    assert isinstance(model[0], nn.Linear)


def test_the_largest_storages_are_listed_biggest_first() -> None:
    code = "a = torch.zeros(10)\nb = torch.zeros(300)\nc = torch.zeros(20)\nd = torch.zeros(5)\n" \
           "e = torch.zeros(40)\nf = torch.zeros(7)\ng = torch.zeros(2)\n" + \
           "".join(f"h{i} = torch.zeros(1)\n" for i in range(8))  # more strips than an open view draws
    view = explore(code)
    frame = frame_at(view)
    shown = [(frame.text(s.name_k), frame.text(s.size_k)) for s in view.memory.largest if frame.shows(s.k)]
    assert shown == [("b", "1.2 KiB"), ("e", "160 B"), ("c", "80 B"), ("a", "40 B"), ("f", "28 B")]
    # an earlier step: only what exists then
    early = frame_at(view, 2)
    assert [early.text(s.name_k) for s in view.memory.largest if early.shows(s.k)] == ["b", "c", "a"]


def test_a_small_run_opens_its_groups_and_a_large_one_shows_one_line_each() -> None:
    small = explore("x = torch.ones(3)\ny = x * 2\n").memory
    assert small.open and small.largest == ()  # its strips are on screen: no list of them
    big = "\n".join(f"t{i} = torch.ones({i + 1})" for i in range(14)) + "\n"
    assert not explore(big).memory.open and explore(big).memory.largest
