"""An argument passed by name is the same argument: ``torch.autograd.backward(tensors=loss)``,
``torch.set_grad_enabled(mode=False)`` and ``torch.autograd.grad(outputs=..., inputs=...)`` are read
as their positional spellings are, finding for finding and patch for patch. Plain torch says first
that the pitfall is there (the parameters before the cut never get a gradient; the call fails).
(``meter.update(val=loss)`` and clears under ``no_grad``: ``corpus/handed.py``, ``corpus/cleared.py``.)"""

from __future__ import annotations

import pytest
from diagnostics_support import namespace, run

from app.diagnosis import apply

GRAD_OFF = """\
model = nn.Linear(4, 3)
head = nn.Linear(3, 1)
opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)
for step in range(3):
    x = torch.randn(8, 4)
    with torch.set_grad_enabled(MODE):
        h = model(x)
    loss = head(h).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
"""

DETACHED = """\
model = nn.Linear(4, 3)
head = nn.Linear(3, 1)
opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)
for step in range(3):
    h = model(torch.randn(8, 4)).detach()
    loss = head(h).pow(2).mean()
    BACKWARD
    opt.step()
    opt.zero_grad(set_to_none=False)
"""

SPELLINGS = {
    "set_grad_enabled": (GRAD_OFF.replace("MODE", "False"), GRAD_OFF.replace("MODE", "mode=False")),
    "autograd.backward": (DETACHED.replace("BACKWARD", "torch.autograd.backward(loss)"),
                          DETACHED.replace("BACKWARD", "torch.autograd.backward(tensors=loss)")),
    "autograd.backward, grad_tensors": (
        DETACHED.replace("BACKWARD", "torch.autograd.backward([loss], [torch.ones(())])"),
        DETACHED.replace("BACKWARD",
                         "torch.autograd.backward(grad_tensors=[torch.ones(())], tensors=[loss])")),
}


def _shape(code: str, fails: bool = False) -> list[tuple[str, str, int | None, list[str]]]:
    r = run(code)
    assert r.result.ok is not fails, r.result.error
    return [(d.rule, d.severity, d.line, [p.text for p in d.patch]) for d in r.diagnostics]


@pytest.mark.parametrize("name", SPELLINGS)
def test_by_name_is_read_as_by_position(name: str) -> None:
    positional, named = SPELLINGS[name]
    for code in (positional, named):  # plain torch: the parameters before the cut never get a gradient
        model = namespace(code)["model"]
        assert model.weight.grad is None and model.bias.grad is None
    by_position, by_name = _shape(positional), _shape(named)
    assert [rule for rule, *_ in by_position] == ["grad-stays-none"]
    assert [(rule, severity, line) for rule, severity, line, _ in by_name] == \
        [(rule, severity, line) for rule, severity, line, _ in by_position]
    assert by_name[0][3], "the patch of the positional spelling, for the named one too"
    fixed = apply(named, run(named).diagnostics[0].patch)
    model = namespace(fixed)["model"]  # and it lets the gradient through
    assert model.weight.grad is not None


NO_GRAPH = """\
w = torch.randn(3, requires_grad=True)
x = torch.randn(3)
y = (w.detach() * x).sum()
CALL
"""
NO_GRAPH_CALLS = {
    "autograd.grad": ("g = torch.autograd.grad(y, [w])", "g = torch.autograd.grad(outputs=y, inputs=[w])"),
    "autograd.backward": ("torch.autograd.backward(y)", "torch.autograd.backward(tensors=y)"),
}


@pytest.mark.parametrize("name", NO_GRAPH_CALLS)
def test_a_root_without_graph_is_named_by_name_too(name: str) -> None:
    positional, named = (NO_GRAPH.replace("CALL", call) for call in NO_GRAPH_CALLS[name])
    for code in (positional, named):  # plain torch: the root has no graph, the call fails
        with pytest.raises(RuntimeError, match="does not require grad"):
            namespace(code)
    by_position, by_name = _shape(positional, fails=True), _shape(named, fails=True)
    assert [rule for rule, *_ in by_position] == ["backward-without-graph"] and by_position[0][3]
    assert by_name == by_position  # the same line and the same patch (the detach() removed)
