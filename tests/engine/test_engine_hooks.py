"""A node's hooks and metadata keys (app/engine/hooks.py), with torch as the oracle: the hook dicts
torch itself runs (reached through the handles it returned, and ``t._backward_hooks``), and what the
snippet prints of ``grad_fn.metadata`` run plainly."""

from __future__ import annotations

from types import FunctionType

import pytest

from app.engine import EngineLimits, trace_delta
from app.engine.hooks import registers_hooks
from app.schema import DeltaTrace
from app.trace.delta import expand
from tests.engine.torch_oracle import run_plain

HOOKS = (
    "x = torch.ones(2, requires_grad=True)\n"  # 1
    "y = x * 2\n"  # 2
    "z = y.sum()\n"  # 3
    "def on_y(g):\n"  # 4
    "    return None\n"  # 5
    "def pre_y(grad_outputs):\n"  # 6
    "    return None\n"  # 7
    "def post_z(grad_inputs, grad_outputs):\n"  # 8
    "    return None\n"  # 9
    "hy = y.register_hook(on_y)\n"  # 10
    "hp = y.grad_fn.register_prehook(pre_y)\n"  # 11
    "hz = z.grad_fn.register_hook(post_z)\n"  # 12
    "hz2 = z.grad_fn.register_hook(print)\n"  # 13
    "hx = x.register_hook(lambda g: g * 3)\n"  # 14
    "hy.remove()\n"  # 15
    "z.backward()\n"  # 16
)


def _name(hook) -> str | None:
    return hook.__qualname__ if isinstance(hook, FunctionType) else None


def _torch_says(namespace: dict) -> dict[str, list[tuple[str, str | None]]]:
    """Node name -> (kind, name) of every hook torch keeps for it, from torch's own dicts."""

    def held(hooks) -> list:
        return list(hooks.values()) if hooks else []

    y, x = namespace["y"], namespace["x"]
    return {
        "MulBackward0": [("tensor", _name(h)) for h in held(y._backward_hooks)]
        + [("pre", _name(h)) for h in held(namespace["hp"].hooks_dict_ref())],
        "SumBackward0": [("post", _name(h)) for h in held(namespace["hz"].hooks_dict_ref())],
        "AccumulateGrad": [("tensor", _name(h)) for h in held(x._backward_hooks)],
    }


def _hooks(step) -> dict[str, list[tuple[str, str | None]]]:
    return {n.name: [(h.kind, h.name) for h in n.hooks] for n in step.nodes.values()}


def _steps(code: str, full: bool = False):
    result = expand(DeltaTrace.model_validate(trace_delta(code, EngineLimits(full_snapshots=full))))
    assert result.ok, result.error
    return [s for s in result.steps if s.phase == "forward"]


def test_hooks_are_the_ones_torch_keeps_and_change_at_their_lines() -> None:
    steps = _steps(HOOKS)
    by_line = {s.line: s for s in steps}  # (the last step of each line)
    plain = run_plain(HOOKS)
    assert plain.error is None
    expected = _torch_says(plain.namespace)
    assert expected["SumBackward0"] == [("post", "post_z"), ("post", None)]  # the oracle sees them
    assert _hooks(by_line[16]) == expected
    # Each registration is seen at the step of its own line, though the node was read long before.
    assert _hooks(by_line[10])["MulBackward0"] == [("tensor", "on_y")]
    assert _hooks(by_line[11])["MulBackward0"] == [("tensor", "on_y"), ("pre", "pre_y")]
    assert _hooks(by_line[12])["SumBackward0"] == [("post", "post_z")]
    assert _hooks(by_line[13])["SumBackward0"] == [("post", "post_z"), ("post", None)]
    assert _hooks(by_line[13])["AccumulateGrad"] == []
    assert _hooks(by_line[14])["AccumulateGrad"] == [("tensor", "<lambda>")]
    assert _hooks(by_line[15])["MulBackward0"] == [("pre", "pre_y")]  # removed by its handle


POST_ACCUMULATE = (
    "w = torch.ones(2, requires_grad=True)\n"  # 1
    "def after(p):\n"  # 2
    "    print('accumulated', p.grad)\n"  # 3
    "ha = w.register_post_accumulate_grad_hook(after)\n"  # 4: no graph yet, no AccumulateGrad
    "y = (w * 2).sum()\n"  # 5
    "hb = w.register_post_accumulate_grad_hook(lambda p: None)\n"  # 6
    "ht = w.register_hook(lambda g: g)\n"  # 7
    "hb.remove()\n"  # 8
    "y.backward()\n"  # 9
)


def test_post_accumulate_grad_hooks_are_the_leafs_and_listed_on_its_accumulate_grad() -> None:
    plain = run_plain(POST_ACCUMULATE)
    assert plain.error is None and plain.stdout == "accumulated tensor([2., 2.])\n"
    w = plain.namespace["w"]
    expected = [("tensor", _name(h)) for h in w._backward_hooks.values()] + [
        ("post_accumulate_grad", _name(h)) for h in w._post_accumulate_grad_hooks.values()]
    assert expected == [("tensor", "<lambda>"), ("post_accumulate_grad", "after")]  # torch's own dicts
    steps = _steps(POST_ACCUMULATE)
    by_line = {s.line: s for s in steps}
    assert "AccumulateGrad" not in _hooks(by_line[4])
    assert _hooks(by_line[5])["AccumulateGrad"] == [("post_accumulate_grad", "after")]
    assert _hooks(by_line[6])["AccumulateGrad"] == [("post_accumulate_grad", "after"),
                                                    ("post_accumulate_grad", "<lambda>")]
    assert _hooks(by_line[7])["AccumulateGrad"] == [("tensor", "<lambda>"), ("post_accumulate_grad", "after"),
                                                    ("post_accumulate_grad", "<lambda>")]
    assert _hooks(by_line[8])["AccumulateGrad"] == expected  # removed by its handle
    assert _hooks(by_line[9])["AccumulateGrad"] == expected
    assert steps[-1].stdout == plain.stdout  # torch ran the hook, once, as in the plain run
    assert [_hooks(s) for s in steps] == [_hooks(s) for s in _steps(POST_ACCUMULATE, full=True)]


COMPUTED_PRELUDE = (
    "x = torch.ones(2, requires_grad=True)\n"
    "y = x * 2\n"
    "def post(grad_inputs, grad_outputs):\n"
    "    return None\n"
)
NAME = "'register_' + 'ho' + 'ok'"  # a name the source never spells
COMPUTED = {
    "getattr": f"h = getattr(y.grad_fn, {NAME})(post)\n",
    "attrgetter": f"import operator\nh = operator.attrgetter({NAME})(y.grad_fn)(post)\n",
    "vars of its type": f"m = [vars(c) for c in type(y.grad_fn).__mro__ if {NAME} in vars(c)][0][{NAME}]\n"
                        "h = m(y.grad_fn, post)\n",
    "getmembers": f"import inspect\nh = dict(inspect.getmembers(y.grad_fn))[{NAME}](post)\n",
    "exec": "exec('h = y.grad_fn.register_' + 'ho' + 'ok(post)')\n",
    # Python reads the identifier as register_hook (NFKC)
    "full-width letters": "h = y.grad_fn.register_\uff48\uff4f\uff4f\uff4b(post)\n",
}


@pytest.mark.parametrize("line", COMPUTED.values(), ids=COMPUTED.keys())
def test_a_hook_registered_through_a_name_the_source_never_spells_is_seen(line: str) -> None:
    code = COMPUTED_PRELUDE + line
    assert "hook" not in code
    plain = run_plain(code)
    assert plain.error is None
    expected = [("post", _name(h)) for h in plain.namespace["h"].hooks_dict_ref().values()]
    assert expected == [("post", "post")]  # torch's own dict: registered
    steps = _steps(code)
    assert _hooks(steps[-1])["MulBackward0"] == expected
    assert [_hooks(s) for s in steps] == [_hooks(s) for s in _steps(code, full=True)]


def test_snippets_that_cannot_register_hooks_run_unwatched() -> None:
    """The profile function costs every call the snippet makes: the benchmark's snippets (none
    registers a hook) run without it, and so does every golden snippet but the two that may."""
    from app.bench.engine import CLONE_DETACH, TRAINING_LOOP
    from app.bench.snippets import ADAM, DEEP_BACKWARD, LEAK, NUMPY_KEPT
    from tests.golden import load

    for source in (CLONE_DETACH, TRAINING_LOOP, ADAM, DEEP_BACKWARD, LEAK, NUMPY_KEPT):
        assert not registers_hooks(source)
    assert sum(registers_hooks(g.source) for g in load()) == 2  # a hook, and a getattr
    assert registers_hooks("h = t.register_hook(f)") and registers_hooks("getattr(t, name)(f)")
    assert registers_hooks("f = eval\n") and not registers_hooks("model.eval()\nm = torch.compile(m)\n")


def test_the_engines_own_backward_hooks_are_not_listed() -> None:
    code = "x = torch.ones(2, requires_grad=True)\ny = (x * 2).sum()\ny.backward()\nz = x * 1\n"
    result = expand(DeltaTrace.model_validate(trace_delta(code)))
    assert result.ok and any(s.phase == "backward" for s in result.steps)
    assert all(not n.hooks for s in result.steps for n in s.nodes.values())


def test_incremental_and_whole_snapshots_agree_on_hooks() -> None:
    assert [_hooks(s) for s in _steps(HOOKS)] == [_hooks(s) for s in _steps(HOOKS, full=True)]


METADATA = (
    "x = torch.ones(2, requires_grad=True)\n"
    "y = x * 2\n"
    "z = y.exp()\n"
    "print(len(y.grad_fn.metadata), y.grad_fn.metadata, z.grad_fn.metadata == {})\n"
    "y.grad_fn.metadata['note'] = 'mine'\n"
    "print(sorted(y.grad_fn.metadata))\n"
    "with torch.autograd.detect_anomaly():\n"
    "    w = (x * 3).sum()\n"
    "print(sorted(w.grad_fn.metadata))\n"
)


def test_metadata_keys_are_torchs_and_reading_them_leaves_no_mark() -> None:
    plain = run_plain(METADATA)
    assert plain.error is None
    steps = _steps(METADATA)
    # The engine read every node's metadata before the snippet's first look: it cannot tell.
    # (v1: all printed so far; a warning torch prints names the file the code was compiled as)
    assert steps[-1].stdout == plain.stdout.replace("<plain>", "<snippet>")
    assert plain.stdout.startswith("0 {} True\n['note']\n")
    by_line = {s.line: s for s in steps}

    def keys(line: int, name: str) -> list[str]:
        step = by_line[line]
        return step.nodes[step.tensors[step.variables[name]].grad_fn].metadata

    assert keys(4, "y") == []
    assert keys(5, "y") == ["note"]  # written at line 5: seen at that line's step
    assert keys(9, "y") == ["note"]
    assert keys(9, "w") == sorted(plain.namespace["w"].grad_fn.metadata) == ["traceback_"]


def test_the_new_fields_keep_the_contract() -> None:
    """Empty, they are left out of the JSON (traces from before them read the same); set, they
    survive both formats."""
    from app.trace.delta import compress

    delta = DeltaTrace.model_validate(trace_delta(HOOKS))
    v1 = expand(delta)
    assert expand(DeltaTrace.model_validate(compress(v1))) == v1
    dumped = [n for s in v1.model_dump(mode="json")["steps"] for n in s["nodes"].values()]
    assert any("hooks" in n for n in dumped)
    assert all("metadata" not in n for n in dumped)  # no node of HOOKS has metadata keys
    assert all(n["hooks"] for n in dumped if "hooks" in n)
