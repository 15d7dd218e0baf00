"""The gate never lets a string become code, nor a namespace dict become a class (issue 25, hole 2).

Through the real sandbox with the gate on: every entry point that evaluates or compiles a string
(``typing.get_type_hints`` over string annotations, however they got there; ``singledispatch``'s
``register``; ``ForwardRef``), every attribute walk by the names a string holds (``string.Formatter``,
format fields), and every class factory that takes a namespace (``make_dataclass``, metaclasses,
``type(name, bases, dict)`` however ``type`` is reached) is refused with what to write instead, and
the string never runs. Snippets compile as Python compiles a script: the engine's own ``from
__future__ import annotations`` does not make their annotations strings (``tutorial_corpus.py``:
``annotation-forward-name`` fails as plain Python fails).
"""

from __future__ import annotations

import pytest
from sandbox_support import Server, assert_benign, text

PAYLOAD = "print('EVALUATED') or int"

# (id, code, the message code, refused before the run (the gate) or while it runs (its builtins))
CASES = [
    ("string-annotation", f'import typing\ndef f(x: "{PAYLOAD}"): pass\ntyping.get_type_hints(f)\n',
     "policy.instead.get_type_hints", True),
    ("annotation-by-global-name", f'import typing\ns = "{PAYLOAD}"\ndef f(x: s): pass\n'
     "print(typing.get_type_hints(f))\n", "policy.instead.get_type_hints", True),
    ("class-annotation", f'import typing\nclass A:\n    x: "{PAYLOAD}"\ntyping.get_type_hints(A)\n',
     "policy.instead.get_type_hints", True),
    ("typing-generic-forward-ref", f'import typing\ndef f(x: typing.List["{PAYLOAD}"]): pass\n'
     "from typing import get_type_hints as hints\nhints(f)\n", "policy.instead.get_type_hints", True),
    ("future-annotations", f"from __future__ import annotations\nimport typing\ndef f(x: {PAYLOAD}): pass\n"
     "typing.get_type_hints(f)\n", "policy.instead.get_type_hints", True),
    ("forward-ref", f'import typing\nr = typing.ForwardRef("{PAYLOAD}")\n', "policy.instead.ForwardRef",
     True),
    ("singledispatch-register", "import functools\n@functools.singledispatch\ndef f(x):\n    pass\n"
     f'@f.register\ndef g(x: "{PAYLOAD}"):\n    pass\n', "policy.instead.singledispatch", True),
    ("singledispatchmethod", "from functools import singledispatchmethod\n",
     "policy.instead.singledispatchmethod", True),
    ("make-dataclass-namespace", "import dataclasses\n"
     "C = dataclasses.make_dataclass('C', [], namespace={'__getattr__': lambda self, n: n})\n",
     "policy.instead.make_dataclass", True),
    ("make-dataclass-imported", "from dataclasses import make_dataclass\n", "policy.instead.make_dataclass",
     True),
    ("type-three-arguments", "A = type('A', (), {'__getattr__': lambda self, n: n})\n", "policy.type_class",
     True),
    ("metaclass-called", "A = type(nn.Module)('A', (), {'__getattr__': lambda self, n: n})\n",
     "policy.type_of_class", True),
    ("typing-abcmeta", "import typing\nA = typing.ABCMeta('A', (), {'__getattr__': lambda s, n: n})\n",
     "policy.metaclass", True),
    ("namedtuple-meta", "from typing import NamedTupleMeta\n", "policy.metaclass", True),
    ("function-meta", "import torch.autograd.function as fn\nM = fn.FunctionMeta\n", "policy.metaclass",
     True),
    ("string-formatter", "import string\nfmt = string.Formatter()\n"
     "print(fmt.vformat('{0.__class__}', (1,), {}))\n", "policy.instead.Formatter", True),
    ("format-field-blocked-name", "print('{0.os.environ}'.format(torch))\n", "policy.underscore_format",
     True),
    ("format-through-getattr", "print(getattr('{0.__class__}', 'format')(1))\n", "policy.underscore_format",
     True),
    # What the gate cannot see (a call's callee held in a variable) the snippet's builtins refuse.
    ("metaclass-in-a-variable", "meta = type(nn.Module)\nA = meta('A', (), {'__len__': lambda s: 1})\n",
     "policy.type_of_class", False),
    ("type-in-a-variable", "make = type\nA = make('A', (), {'__getattr__': lambda s, n: n})\n",
     "policy.type_class", False),
    ("type-subclassed", "class Meta(type):\n    pass\nA = Meta('A', (), {'__getattr__': lambda s, n: n})\n",
     "policy.type_class", False),
]


@pytest.mark.parametrize(("code", "message_code", "early"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_strings_never_become_code(gated_server: Server, code: str, message_code: str, early: bool) -> None:
    result = gated_server.run(code)
    error = result["error"]
    assert not result["ok"] and error["kind"] == "rejected", error
    assert error["code"] == message_code
    assert error["type"] == ("PolicyError" if early else "TypeError")
    if early:
        assert result["steps"] == []  # the gate refuses before any line runs
    assert "EVALUATED" not in text(result)
    assert_benign(gated_server)


def test_type_still_answers_what_a_value_is(gated_server: Server) -> None:
    result = gated_server.run("x = torch.ones(1)\nprint(type(x), type(x) is torch.Tensor, type(3).__name__,\n"
                              "      isinstance(nn.Linear, type), issubclass(nn.Linear, nn.Module), type)\n")
    assert result["ok"], result["error"]
    assert result["steps"][-1]["stdout"] == "<class 'torch.Tensor'> True int True True <class 'type'>\n"
