"""Real tutorial code runs in the real sandbox (issue #11, 3 and 5): the gate accepts it and the OS
layers (seccomp allow-list, Landlock) let torch, numpy and the standard library do their work."""

from __future__ import annotations

import math

import pytest
from sandbox_support import Server
from test_policy import TEACHING

from app.gallery import get_example
from app.schema import DeltaResponse
from app.trace.delta import expand

TUTORIAL = sorted(name for name in TEACHING if name.startswith("tutorial-"))

FORWARD_AD = """\
import torch.autograd.forward_ad as fwAD
with fwAD.dual_level():
    dual = fwAD.make_dual(torch.ones(3), torch.ones(3))
    tangent = fwAD.unpack_dual(dual.sin()).tangent
print(tangent.tolist())
"""
FUNC_JVP = """\
from torch.func import jvp
out, tangent = jvp(torch.sin, (torch.ones(3),), (torch.ones(3),))
print(tangent.tolist())
"""
NUMPY = """\
import numpy as np
x = torch.arange(4.0)
a = x.numpy()
a[0] = 7
b = np.array(x)
b[1] = 9
print(x.tolist(), float(np.asarray(x).sum()), torch.from_numpy(np.ones(2)).dtype)
"""


@pytest.mark.parametrize("name", TUTORIAL)
def test_tutorial_code_runs(gated_server: Server, name: str) -> None:
    result = gated_server.run(TEACHING[name])
    assert result["ok"], result["error"]


@pytest.mark.parametrize("code", [FORWARD_AD, FUNC_JVP], ids=["forward-ad", "func-jvp"])
def test_forward_mode_ad_works_in_the_sandbox(gated_server: Server, code: str) -> None:
    result = gated_server.run(code)
    assert result["ok"], result["error"]
    printed = result["steps"][-1]["stdout"]
    assert [round(v, 5) for v in eval(printed)] == [round(math.cos(1.0), 5)] * 3  # noqa: S307 - our print


def test_numpy_shares_memory_as_in_a_plain_run(gated_server: Server) -> None:
    result = gated_server.run(NUMPY)
    assert result["ok"], result["error"]
    # (np.array(x) may also print numpy 2's DeprecationWarning about __array__, as a plain run does.)
    assert result["steps"][-1]["stdout"].splitlines()[-1] == "[7.0, 1.0, 2.0, 3.0] 13.0 torch.float64"


def test_cuda_gets_torchs_own_error(gated_server: Server) -> None:
    result = gated_server.run('device = "cuda" if torch.cuda.is_available() else "cpu"\n'
                              'print(device)\ny = torch.ones(2).to("cuda")\n')
    assert result["steps"][-1]["stdout"].startswith("cpu")
    assert result["error"]["kind"] == "runtime" and "CUDA" in result["error"]["message"]


def test_the_numpy_gallery_example_shows_sharing_in_the_real_sandbox(gated_server: Server) -> None:
    example = get_example("numpy-shares-or-copies")
    assert example is not None
    result = gated_server.run(example.code)
    assert result["ok"], result["error"]
    last = expand(DeltaResponse.model_validate(result)).model_dump()["steps"][-1]  # the state at the end
    t = last["tensors"][last["variables"]["t"]]
    arrays = {fact["names"][0]: fact for fact in last["arrays"].values()}
    assert arrays["a"]["storage"] == arrays["s"]["storage"] == t["storage"]  # .numpy(), np.asarray
    assert arrays["c"]["storage"] is None and arrays["c"]["owner"] == "numpy"  # np.array copies
    assert t["values"] == arrays["a"]["values"] == [5.0, 0.0, 0.0] and t["version"] == 0
    assert arrays["c"]["values"] == [0.0, 7.0, 0.0]
