"""The policy gate on its own: what a learner may write, and the messages for what they may not."""

from __future__ import annotations

import re

import pytest

from app import policy, policy_builtins
from app.policy_names import ONLY_NAMES
from app.run_errors import TEMPLATES

TEACHING = {
    "clone-detach": "x = torch.ones(3, requires_grad=True)\ny = x.clone()\nz = x.detach()\nz.add_(1)\n",
    "internals-shown": "a = torch.ones(4)\nb = a.view(2, 2)\n"
    "print(b._base is a, b._is_view(), a._version)\n",
    "saved-tensors": "x = torch.ones(2, requires_grad=True)\ny = x.sigmoid()\n"
    "print(y.grad_fn._saved_result)\n",
    "module-class": "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.fc = nn.Linear(2, 1)\n    def forward(self, x):\n        return self.fc(x)\n"
    "    def __repr__(self):\n        return 'Net'\n",
    "imports": "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
    "from torch import optim, tensor\n"
    "from torch.autograd import grad\nimport math, random, itertools, collections\n",
    "formatting": "v = 1.5\nprint(f'{v:.2f}', '{:>8.3f}'.format(v))\n"
    "print('{0} {name}'.format(1, name='x'), '%d' % 3)\n",
    "loop-and-main": "for _ in range(3):\n    pass\nif __name__ == '__main__':\n    print('ok')\n",
    "no-grad": "with torch.no_grad():\n    w = torch.zeros(2)\n    w -= 0.1 * torch.ones(2)\n",
    "lambda-comprehension": "sq = [(lambda t: t * t)(torch.tensor(float(i))) for i in range(3)]\n",
    # Real tutorial code (issue #11, 5).
    "tutorial-device": 'device = "cuda" if torch.cuda.is_available() else "cpu"\n'
    "x = torch.ones(2).to(device)\n",
    "tutorial-data": "from torch.utils.data import TensorDataset, DataLoader\n"
    "ds = TensorDataset(torch.ones(4, 2), torch.zeros(4))\n"
    "for xb, yb in DataLoader(ds, batch_size=2, num_workers=0):\n    pass\n",
    "tutorial-checkpoint": "import torch.utils.checkpoint\nfrom torch.utils.checkpoint import checkpoint\n"
    "y = torch.utils.checkpoint.checkpoint(torch.sin, torch.ones(2, requires_grad=True),\n"
    "                                     use_reentrant=False)\n",
    "tutorial-nn-utils": "m = nn.Linear(2, 2)\ntorch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)\n"
    "from torch.nn.utils import parametrize, weight_norm\n"
    "from torch.nn.utils.parametrizations import orthogonal\n",
    "tutorial-stdlib": "import copy, dataclasses, functools, typing\n"
    "from dataclasses import dataclass, field\n"
    "from typing import Optional\nfrom functools import partial\nb = copy.deepcopy([1])\n",
    "tutorial-class": "class Acc:\n    __slots__ = ('_hidden',)\n    def __init__(self):\n"
    "        self._hidden = 0\n    def __radd__(self, other):\n        return self\n"
    "    def __del__(self):\n        pass\n    def __bool__(self):\n        return True\n",
    "tutorial-named-attributes": "m = nn.Linear(2, 2)\nif hasattr(m, 'weight'):\n"
    "    w = getattr(m, 'weight')\nsetattr(m, 'scale', 2.0)\nb = getattr(m, 'bias', None)\n",
    "tutorial-numpy": "import numpy as np\nx = torch.ones(3)\na = x.numpy()\nb = np.asarray(x)\n"
    "c = torch.from_numpy(np.zeros(2, dtype=np.float32))\n",
    "tutorial-module-alias": "import torch.nn.functional as F2\nG = torch.nn.functional\n"
    "y = G.relu(torch.ones(1)) + F2.relu(torch.ones(1))\n",
    "custom-function": "class Sq(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, a):\n"
    "        ctx.save_for_backward(a)\n        return a * a\n",
    # What PyTorch's docs and tutorials write (issue 24, 5): tutorial_corpus.py runs them all.
    "input-name": "input = torch.randn(3)\ndef hook(module, input, output):\n    return output\n"
    "y = F.relu(input=input)\nprint(input)\nfor input in [input]:\n    pass\n",
    "input-in-a-function": "def forward(self, input):\n    global input2\n    return input\n",
    "cpu-amp": "import torch.nn.parallel\nwith torch.cpu.amp.autocast():\n    y = torch.ones(1)\n"
    "from torch.cpu.amp import autocast\n",
    "tutorial-modules": "from __future__ import annotations\n"
    "import torch.optim.lr_scheduler as lr_scheduler\n"
    "from torch.optim.lr_scheduler import StepLR, OneCycleLR\n"
    "from torch.optim.swa_utils import AveragedModel\n"
    "from torch.amp import autocast, GradScaler\nfrom torch.autograd.function import once_differentiable\n"
    "import unicodedata, string, re, time, warnings\n"
    "s = torch.optim.lr_scheduler.StepLR\nc = torch.cuda.amp.GradScaler\nm = torch.sparse.mm\n"
    "torch.testing.assert_close(torch.ones(1), torch.ones(1))\nprint(torch.backends.mps.is_available())\n",
    "backend-flags": "torch.backends.cudnn.benchmark = True\nimport torch.backends.cudnn as cudnn\n"
    "cudnn.deterministic = True\ntorch.backends.cuda.matmul.allow_tf32 = False\n",
    "class-name": "def weights_init(m):\n    classname = m.__class__.__name__\n    return type(m).__name__\n"
    "print(F.relu.__name__, torch.Tensor.__qualname__)\n",
    "type-of-a-value": "t = type\nprint(type(1), isinstance(int, type))\n",
    "string-annotations": "from typing import List\ndef f(x: 'List[int]') -> 'int':\n    return 1\n"
    "L = List['Node']\n",
    "format-fields": "print('{0.shape} {x.grad}'.format(torch.ones(1), x=torch.ones(1)))\n",
    # the standard library's plain helpers; of operator, all but its attribute walkers
    "stdlib-helpers": "import json, abc, numbers, heapq, bisect, statistics, pprint, textwrap\n"
    "from abc import ABC, abstractmethod\nimport operator\nfrom operator import itemgetter, mul\n"
    "from functools import reduce\nn = reduce(operator.mul, [2, 3])\nc = json.loads('{\"a\": 1}')\n",
    "torch-function": "from torch.overrides import TorchFunctionMode\nclass T(torch.Tensor):\n"
    "    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
    "        return super().__torch_function__(func, types, args, kwargs)\n"
    "    def __deepcopy__(self, memo):\n        return self\n",
    "submodules": "from torch.distributions.normal import Normal\n"
    "from torch.optim.optimizer import Optimizer\n"
    "from torch.utils.data.dataset import Dataset\nfrom torch.utils.hooks import RemovableHandle\n"
    "print(torch.xpu.is_available(), torch.xpu.device_count())\n",
    "default-device": 'torch.set_default_device("cpu")\ntorch.set_default_tensor_type(torch.FloatTensor)\n',
}


@pytest.mark.parametrize("name", sorted(TEACHING))
def test_teaching_snippets_pass(name: str) -> None:
    assert policy.check(TEACHING[name]) is None


REJECTED = [
    # (snippet, line, words the learner reads)
    ("import os", 1, "Importing `os` is not available in the playground"),
    ("x = 1\nimport subprocess", 2, "Importing `subprocess`"),
    ("from os import path", 1, "Importing `os`"),
    ("from torch import *", 1, "import *"),
    ("from . import x", 1, "Relative imports"),
    ("open('/etc/passwd')", 1, "`open` is not available in the playground: there are no files here"),
    ("f = eval", 1, "`eval` is not available"),
    ("getattr(torch, 'o' + 's')", 1, "`getattr` is only available called with an attribute name"),
    ("g = getattr\ng(torch, 'os')", 1, "`getattr`"),
    ("getattr(torch, 'os')", 1, "`torch.os` is not available"),
    ("setattr(torch, 'add', None)", 1, "Changing `torch`"),
    ("print(globals())", 1, "`globals`"),
    ("__import__('os')", 1, "`__import__`"),
    ("().__class__.__bases__", 1, "Attributes starting with `_`"),
    ("().__ｃｌａｓｓ__", 1, "`.__class__`"),  # the parser folds full-width letters (NFKC)
    ("ｏｐｅｎ('x')", 1, "`open`"),
    ("torch.os.system('id')", 1, "`torch.os` is not available"),
    # Walks into modules that are not the snippet's imports (operator.attrgetter reaches everything).
    ("torch.nn.modules.container.operator.attrgetter('x')", 1, "`torch.nn.modules`"),
    ("torch.functional.operator.methodcaller('x')", 1, "`torch.functional`"),
    ("import torch.nn as nn\nnn.modules.container.operator", 2, "the module `torch.nn.modules`"),
    ("getattr(torch, 'functional').operator", 1, "the module `torch.functional`"),
    ("torch.nn.functional.torch.functional.operator", 1, "the module `torch.functional`"),
    ("from torch.nn import modules", 1, "`torch.nn.modules`"),
    ("m = torch\nm.functional.operator", 2, "the module `torch.functional`"),
    ("F = torch.nn.functional\nF.torch.functional.operator", 2, "the module `torch.functional`"),
    ("ms = [torch]\nms[0].functional.operator", 1, "The module `torch` can only be used"),
    ("def f(m):\n    return m.functional\nf(torch)", 3, "The module `torch` can only be used"),
    ("m = (torch if True else math)", 1, "The module `torch` can only be used"),
    ("import numpy as np\nnp.ctypeslib.as_array(0)", 2, "`np.ctypeslib`"),
    ("y = torch.zeros(2)\ny.tofile('x')", 2, "`y.tofile`"),
    ("torch.sys.modules", 1, "`torch.sys`"),
    ("torch.ctypes.CDLL(None)", 1, "`torch.ctypes`"),
    ("torch.builtins.open", 1, "`torch.builtins`"),
    ("torch.importlib", 1, "`torch.importlib`"),
    ("y = torch.load('m.pt')", 1, "`torch.load`"),
    ("torch.save(x, 'm.pt')", 1, "`torch.save`"),
    ("torch.from_file('x')", 1, "`torch.from_file`"),
    ("torch.hub.load('a', 'b')", 1, "`torch.hub.load`"),
    ("torch.utils.cpp_extension.load_inline('a', '')", 1, "cpp_extension"),
    ("f = torch.compile(g)", 1, "`torch.compile`"),
    ("torch.jit.script(f)", 1, "`torch.jit.script`"),
    ("torch.multiprocessing.Process()", 1, "`torch.multiprocessing`"),
    ("torch.distributed.init_process_group()", 1, "`torch.distributed`"),
    ("torch.ops.aten.add", 1, "`torch.ops`"),
    ("torch.library.Library('aten', 'IMPL')", 1, "`torch.library`"),
    ("g = (i for i in [1])\nf = g.gi_frame", 2, "`g.gi_frame`"),
    ("try:\n    pass\nexcept Exception as e:\n    e.__traceback__", 4, "`_`"),
    ("'{0.__class__}'.format(1)", 1, "Format fields"),
    ("'{0:{1.__class__}}'.format(1, 2)", 1, "Format fields"),
    ("s = '{}'\ns.format(1)", 2, "`.format` is only available on a string written in the snippet"),
    ("torch.tensor = None", 1, "Changing `torch.tensor`"),
    ("torch.Tensor.backward = None", 1, "Changing `torch.Tensor.backward`"),
    ("import math\nmath.pi = 3", 2, "Changing `math.pi`"),
    ("@exec\ndef f():\n    pass", 1, "`exec`"),
    ("type('A', (object,), {})", 1, "class statement"),
    ("async def f():\n    pass", 1, "`async` code"),
    ("match x:\n    case object(os=o):\n        pass", 1, "`match` statements"),
    ("def f(__secret):\n    pass", 1, "Names starting with `__`"),
    ("x = torch.ones(1)\nx._secret", 2, "Attributes starting with `_`"),
    ("class A:\n    def f(self):\n        return self.__class__", 3, "`self.__class__`"),
    ("class A:\n    def __getattr__(self, n):\n        pass", 2, "`__getattr__`"),
    ("x = 1\ny = " + "[" * 60 + "]" * 60, 2, "nested too deeply"),
    ("x = 1\n" * 3000, None, "too long"),
    # builtins whose names the snippet never binds are the builtins themselves
    ("x = input()", 1, "`input` is not available in the playground: assign the value"),
    ("def f(input):\n    return input\nprint(open)", 3, "`open` is not available"),
    ("print(vars(torch.ones(1)))", 1, "`vars`"),
    # class names, and nothing else of the class
    ("m = nn.Linear(1, 1)\nk = m.__class__", 2, "`m.__class__` is not available in the playground: write"),
    ("m = nn.Linear(1, 1)\nk = m.__class__.__bases__", 2, "Attributes starting with `_`"),
    ("k = getattr(nn.Linear(1, 1), '__class__').__name__", 1, "write `type(x)`"),
    ("nn.Linear(1, 1).__class__.__name__ = 'x'", 1, "write `type(x)`"),
    # strings that would become code (test_string_evaluation.py: through the sandbox)
    ("import typing\ntyping.get_type_hints(f)", 2, "it runs annotations written as strings as code"),
    ("import dataclasses\nC = dataclasses.make_dataclass('C', [], namespace={})", 2, "class statement"),
    ("import typing\nM = typing.ABCMeta", 2, "`typing.ABCMeta` makes classes from a dict of names"),
    ("A = type(nn.Module)('A', (), {})", 1, "`type()` of a class"),
    ("print('{0.os}'.format(torch))", 1, "Format fields"),
    ("t = '{0.__class__}'\nprint(getattr(t, 'format')(1))", 2, "`.format` is only available on a string"),
    # torch.backends is walkable, its flags settable; nothing else of it
    ("torch.backends.cudnn.version = None", 1, "Changing `torch.backends.cudnn.version`"),
    ("torch.backends.opt_einsum.strategy", 1, "the module `torch.backends.opt_einsum`"),
    ("torch.profiler.tensorboard_trace_handler('log')", 1, "there are no files here"),
    ("def f(__x):\n    pass", 1, "such as `x`"),
    # of gc only what checks what is freed; tutorials' other imports each with their own way forward
    ("import gc\ngc.collect()\nobjs = gc.get_objects()", 3, "of gc, use collect()"),
    ("from gc import get_referrers", 1, "of gc, use collect()"),
    ("import matplotlib.pyplot as plt", 1, "Print the numbers you want to see"),
    ("from torchvision import datasets", 1, "`torch.randn(8, 3, 32, 32)`"),
    ("import glob", 1, "there are no files here"),  # the name-classification tutorial's data files
    ("from io import open", 1, "there are no files here"),
    ("from tqdm import tqdm", 1, "loop over the data directly"),
    ("import sys", 1, "print() writes to the output already"),
    ("from torch.profiler import itt", 1, "Of torch.profiler, use profile"),
    ("import torch.multiprocessing as mp", 1, "num_workers=0"),
    ("import operator\nf = operator.attrgetter('weight')", 2, "Write a lambda instead"),
    ("from operator import methodcaller", 1, "Write a lambda instead"),
    ("import operator as op\nop.methodcaller('x')", 2, "Write a lambda instead"),
    ("import abc\nclass M(abc.ABCMeta):\n    pass", 2, "`abc.ABCMeta` makes classes from a dict of names"),
    ("class C:\n    def __getattr__(self, name):\n        return 1", 2, "Write a plain method and call it"),
    ("class C:\n    def __init_subclass__(cls):\n        pass", 2, "Defining `__init_subclass__`"),
    ("import torch.overrides as o\no.functools", 2, "`torch.overrides.functools` is not available"),
    ("class A:\n    def __init__(self):\n        self._v = 1\nprint(A()._v)", 4,
     "without the `_` (`self.value`)"),
    ("torch.xpu.memory_allocated()", 1, "there is no XPU here"),
    ("from torch.utils.cpp_extension import load_inline", 1, "nothing is compiled here"),
    ("torch.library.custom_op('a::b', mutates_args=())", 1, "a Python function of torch calls"),
    ("import numpy as np\nnp.fromfile('x')", 2, "put the data in the snippet"),
    ("import gymnasium as gym", 1, "there are no environments here"),
    ("from transformers import AutoModel", 1, "Build a small model with torch.nn"),
    ("help(torch.add)", 1, "`print(torch.add.__doc__)`"),
    ("x = 1\nbreakpoint()", 2, "print what you want to check"),
    ("exit()", 1, "end the snippet there"),
    ("import argparse", 1, "Put the settings in variables"),
    ("import logging", 1, "write `print(...)` where the code logs"),
    ("import timeit", 1, "it runs code given as a string"),
    ("import torch.utils.benchmark as benchmark", 1, "it runs code given as a string"),
    ("from torch.utils.tensorboard import SummaryWriter", 1, "print the values you would log"),
    ("from enum import Enum", 1, "use plain constants"),
    ("import pandas as pd", 1, "as lists or tensors"),
    ("from PIL import Image", 1, "`torch.rand(3, 32, 32)`"),
    ("torch.onnx.export(m, x, 'm.onnx')", 1, "nothing is exported here"),
    ("torch.fx.symbolic_trace(m)", 1, "the explorer draws the graph itself"),
    ("from torch.nn.parallel import DistributedDataParallel\ntorch.distributed.barrier()", 2,
     "without the distributed wrapper"),
]


@pytest.mark.parametrize(("code", "line", "words"), REJECTED, ids=[c[:30] for c, _, _ in REJECTED])
def test_rejections_explain_themselves(code: str, line: int | None, words: str) -> None:
    rejection = policy.check(code)
    assert rejection is not None
    assert words in rejection.message
    assert rejection.line == line


def test_every_module_with_only_some_names_says_which() -> None:
    assert {f"policy.only_names.{module}" for module in ONLY_NAMES} <= set(TEMPLATES)


def test_parser_bombs_do_not_escape_the_gate() -> None:
    # The gate runs inside the sandboxed child; still, it must answer rather than raise.
    assert policy.check("1+" * 200_000 + "1").rule == "size"  # type: ignore[union-attr]
    assert policy.check("x = " + "(" * 500 + ")" * 500) is None  # a SyntaxError: the engine reports it
    assert policy.check("x = 1\x00") is None  # null bytes: the engine reports them too


def test_safe_builtins() -> None:
    namespace = policy_builtins.safe_builtins()
    for name in ("open", "eval", "exec", "globals", "vars", "breakpoint", "input", "compile"):
        assert name not in namespace
    # getattr & co. are there: the gate lets them through only with a name written in the snippet.
    for name in ("print", "range", "len", "isinstance", "super", "__build_class__", "getattr", "hasattr"):
        assert name in namespace
    namespace["__import__"]("math")
    with pytest.raises(ImportError, match="not available in the playground"):
        namespace["__import__"]("os")


# What a refusal's second half starts with: a way forward, not only a "no".
WAY_FORWARD = re.compile(r"\b(use|write|import|keep|give|split|build|put|assign|call|choose|read|compare|"
                         r"leave|try|works|make|loop|print|only available called)\b", re.IGNORECASE)


@pytest.mark.parametrize("code", sorted(c for c in TEMPLATES if c.startswith("policy.")))
def test_every_refusal_says_what_to_write_instead(code: str) -> None:
    template = TEMPLATES[code]
    refusal_ends = re.search(r"(not available in the playground|only available|can only be used|too long|"
                             r"too deeply)[^:;.]*", template)
    assert refusal_ends is not None, template
    assert WAY_FORWARD.search(template[refusal_ends.end():]), template
