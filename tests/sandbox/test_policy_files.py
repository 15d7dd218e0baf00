"""The gate and the tutorials' ways of saving, tracing and profiling (issue 24, 5): ``torch.save`` /
``torch.load`` through an ``io.BytesIO`` (the "Saving and loading models" tutorial, without files),
``torch.jit.trace``, the profiler recipe, ``re.compile``, the sparse docs' ``_nnz()`` — accepted; a file
name, an unpickling of arbitrary classes (a pickle names what it calls by strings: an attribute walk),
``torch.load`` held rather than called, ``torch.jit.script`` (it compiles source, which a snippet has
not: a plain run fails too) and ``torch.compile`` refused, each with the way forward."""

from __future__ import annotations

import pytest

from app import policy

ACCEPTED = {
    "bytesio-round-trip": "import io\nbuffer = io.BytesIO()\ntorch.save(model.state_dict(), buffer)\n"
    "buffer.seek(0)\nmodel.load_state_dict(torch.load(buffer, weights_only=True))\n",
    "load-keywords": "from io import BytesIO\nf = BytesIO()\ntorch.save({'a': 1}, f=f)\n"
    "x = torch.load(f, map_location='cpu')\ny = torch.load(f, 'cpu', weights_only=True, mmap=False)\n",
    "alias": "import torch as th\nimport io\nb = io.StringIO()\nth.save(th.ones(1), b)\nt = th.load(b)\n",
    "regex": "import re\npattern = re.compile(r'[^a-zA-Z.!?]+')\nfrom re import compile\nc = compile('a')\n"
    "s = re.sub(r'([.!?])', r' \\1', 'hi!')\n",
    "jit-trace": "import torch.jit\nfrom torch.jit import trace\nm = nn.Linear(2, 2)\n"
    "traced = torch.jit.trace(m, torch.ones(1, 2))\nprint(traced.code, torch.jit.is_scripting())\n",
    "profiler": "from torch.profiler import profile, record_function, ProfilerActivity, schedule\n"
    "import torch.autograd.profiler as legacy\n"
    "with profile(activities=[ProfilerActivity.CPU]) as prof:\n    with record_function('x'):\n"
    "        y = torch.ones(2) * 2\nprint(prof.key_averages().table(sort_by='cpu_time_total', row_limit=5))\n"
    "with torch.autograd.profiler.profile() as p:\n    pass\n",
    "sparse-internals": "s = torch.ones(2).to_sparse()\nprint(s._nnz(), s._values(), s._indices())\n",
    "versions": "import torch.distributions.constraints as constraints\nprint(torch.version.cuda, "
    "torch.__version__, constraints.positive)\n",
    # the scripts' standard library, some of it in part
    "script-stdlib": "from contextlib import nullcontext, suppress, ExitStack, contextmanager\n"
    "from types import SimpleNamespace\nimport weakref, datetime, cmath, fractions, decimal\n"
    "import numpy.random as npr\nfrom numpy import linalg as LA\nimport numpy.fft\n"
    "r = weakref.ref(torch.ones(1))\nargs = SimpleNamespace(lr=0.1)\n",
    # a version check answers a bool: no module is stored
    "hasattr-checks": "if hasattr(torch.backends, 'mps') and torch.backends.mps.is_available():\n"
    "    pass\nprint(hasattr(torch, 'accelerator'), torch.backends.mkldnn.is_available())\n",
}

REJECTED = [
    # (snippet, line, the rule's message code, words of the way forward)
    ("torch.save(model.state_dict(), 'model.pth')", 1, "policy.serialization_file", "io.BytesIO()"),
    ("PATH = 'm.pt'\nmodel.load_state_dict(torch.load(f'{PATH}'))", 2, "policy.serialization_file",
     "torch.load(buffer)"),
    ("torch.save(x, f=b'm.pt')", 1, "policy.serialization_file", "io.BytesIO()"),
    ("x = torch.load(buffer, weights_only=False)", 1, "policy.serialization_pickle", "weights_only=True"),
    ("flag = False\nx = torch.load(buffer, weights_only=flag)", 2, "policy.serialization_pickle",
     "Leave them out"),
    ("x = torch.load(buffer, None, my_pickle)", 1, "policy.serialization_pickle", "weights_only=True"),
    ("torch.save(x, buffer, pickle_module=p)", 1, "policy.serialization_pickle", "weights_only=True"),
    ("x = torch.load(*args)", 1, "policy.serialization_pickle", "weights_only=True"),
    ("x = torch.load(buffer, **options)", 1, "policy.serialization_pickle", "weights_only=True"),
    # held, passed or partially applied, a call the gate would not see
    ("load = torch.load\nx = load(buffer, weights_only=False)", 1, "policy.serialization_called",
     "`torch.load(buffer)`"),
    ("import functools\nf = functools.partial(torch.load, weights_only=False)", 2,
     "policy.serialization_called", "called where it is written"),
    ("x = getattr(torch, 'load')(buffer)", 1, "policy.serialization_called", "called where it is written"),
    ("x = list(map(torch.load, buffers))", 1, "policy.serialization_called", "called where it is written"),
    ("from torch import load", 1, "policy.instead.load", "`torch.load(buffer)`"),
    ("import numpy as np\nnp.save('a.npy', np.ones(2))", 2, "policy.instead.save", "io.BytesIO()"),
    ("torch.serialization.load(buffer)", 1, "policy.instead.load", "io.BytesIO()"),
    ("F.torch.load(buffer)", 1, "policy.instead.load", "io.BytesIO()"),
    # of io, files in memory only
    ("import io\nf = io.open('data.txt')", 2, "policy.only_names.io", "BytesIO"),
    ("from io import FileIO", 1, "policy.only_names.io", "BytesIO"),
    # TorchScript compiles source (or reads files): trace instead; torch.compile left out
    ("@torch.jit.script\ndef f(x):\n    return x", 1, "policy.only_names.torch.jit", "torch.jit.trace"),
    ("from torch.jit import script", 1, "policy.only_names.torch.jit", "torch.jit.trace"),
    ("cu = torch.jit.CompilationUnit('def f(x):\\n    return x')", 1, "policy.only_names.torch.jit",
     "torch.jit.trace"),
    ("m = torch.jit.load(buffer)", 1, "policy.instead.load", "io.BytesIO()"),
    ("model = torch.compile(model)", 1, "policy.instead.compile", "`model = torch.compile(model)` → `model`"),
    ("opt = torch.compile(f, backend='eager')", 1, "policy.instead.compile",
     "call the model or function itself"),
    # the profiler's file writers
    ("from torch.profiler import tensorboard_trace_handler", 1, "policy.only_names.torch.profiler",
     "key_averages().table"),
    ("torch.autograd.profiler.emit_itt()", 1, "policy.only_names.torch.autograd.profiler", "record_function"),
    # what redirects the explorer's output, or makes code from its parts
    ("from contextlib import redirect_stdout", 1, "policy.only_names.contextlib", "nullcontext"),
    ("import types\nf = types.FunctionType(code, {})", 2, "policy.only_names.types", "SimpleNamespace"),
    ("import weakref\nweakref.getweakrefs(x)", 2, "policy.only_names.weakref", "ref"),
    ("print(getattr(torch, 'nn'))", 1, "policy.module_stored", "torch.nn"),
    # other underscore attributes stay closed
    ("s = torch.ones(2).to_sparse()\ns._coalesced_(True)", 2, "policy.underscore_attribute",
     "public attributes"),
]


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_tutorial_saving_tracing_profiling_pass_the_gate(name: str) -> None:
    assert policy.check(ACCEPTED[name]) is None


@pytest.mark.parametrize(("code", "line", "code_", "words"), REJECTED, ids=[c[:40] for c, *_ in REJECTED])
def test_what_stays_closed_says_what_to_write_instead(code: str, line: int, code_: str, words: str) -> None:
    rejection = policy.check(code)
    assert rejection is not None
    assert (rejection.line, rejection.code) == (line, code_)
    assert words in rejection.message


def test_a_single_underscore_name_is_the_snippet_s_own() -> None:
    # the text classification tutorial's `for _label, _text in batch:`; dunder names stay Python's own
    assert policy.check("for _label, _text in batch:\n    _seen = _label\ndef f(_x, *, _y=1):\n"
                        "    return _x\nf(1, _y=2)\n") is None
    assert policy.check("__builtins__").code == "policy.underscore_name"  # type: ignore[union-attr]
    assert policy.check("def f(__x):\n    pass").code == "policy.underscore_name"  # type: ignore[union-attr]
    # a module's private member stays closed however it is reached
    refused = policy.check("from typing import _eval_type")
    assert refused is not None and refused.code == "policy.underscore_attribute"
    assert "typing._eval_type" in refused.message


def test_setattr_and_delattr_with_a_computed_name_pass_the_gate() -> None:
    # the forward-mode AD tutorial's "Usage with Modules", and layers named in a loop
    assert policy.check("for name, p in params.items():\n    delattr(model, name)\n"
                        "    setattr(model, name, p)\nclass Net(nn.Module):\n    def __init__(self):\n"
                        "        super().__init__()\n        for i in range(3):\n"
                        "            setattr(self, f'fc{i}', nn.Linear(2, 2))\nset_it = setattr\n") is None
    # what hands an object out stays closed with a computed name
    refused = policy.check("name = 'fc0'\nlayer = getattr(net, name)")
    assert refused is not None and refused.code == "policy.named_call"


@pytest.mark.parametrize(("target", "name"), [
    ("obj", "_hidden"), ("obj", "__class__"), ("obj", "f_globals"), ("obj", "os"),
    ("module", "anything"), ("torch_class", "forward"),
])
def test_the_gated_setattr_and_delattr_check_the_name_when_they_run(target: str, name: str) -> None:
    import types

    from app import policy_builtins
    from app.run_errors import RefusedAttribute

    class Own:
        pass

    objects = {"obj": Own(), "module": types.ModuleType("m"), "torch_class": dict}
    namespace = policy_builtins.safe_builtins()
    with pytest.raises(RefusedAttribute, match="is not available in the playground"):
        namespace["setattr"](objects[target], name, 1)
    with pytest.raises(RefusedAttribute):
        namespace["delattr"](objects[target], name)


def test_the_gated_setattr_sets_what_the_snippet_names() -> None:
    from app import policy_builtins

    namespace = policy_builtins.safe_builtins()
    exec(compile("class Own:\n    pass\no = Own()\nfor i in range(2):\n    setattr(o, f'fc{i}', i)\n"  # noqa: S102
                 "delattr(o, 'fc0')\nsetattr(Own, 'scale', 2)\n", "<snippet>", "exec"),
         ns := {"__builtins__": namespace, "__name__": "__main__"})
    assert vars(ns["o"]) == {"fc1": 1} and ns["Own"].scale == 2
