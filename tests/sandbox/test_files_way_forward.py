"""A file opened by a name the gate cannot see (the saving tutorial's ``PATH = "model.pth"``, then
``torch.save(model.state_dict(), PATH)``) fails on the sandbox's Landlock layer; the error keeps
torch's words and says where to write instead (``runtime.no_files``). The same round trip through an
``io.BytesIO`` runs, and prints what plain torch prints (``tutorial_corpus_saving.py``)."""

from __future__ import annotations

import pytest
from sandbox_support import Server

SAVE = 'model = nn.Linear(2, 1)\nPATH = "model.pth"\nprint("saving")\ntorch.save(model.state_dict(), PATH)\n'
LOAD = 'PATH = "/etc/hostname"\nstate = torch.load(PATH)\n'


@pytest.mark.parametrize(("code", "line"), [(SAVE, 4), (LOAD, 2)], ids=["save", "load"])
def test_a_file_name_the_gate_cannot_see_gets_the_way_forward(gated_server: Server, code: str,
                                                              line: int) -> None:
    result = gated_server.run(code)
    error = result["error"]
    assert error is not None and error["kind"] == "runtime" and error["line"] == line
    assert error["code"] == "runtime.no_files", error
    assert "io.BytesIO()" in error["message"] and "torch.load(buffer)" in error["message"]


def test_the_round_trip_through_memory_runs(gated_server: Server) -> None:
    result = gated_server.run("import io\nmodel = nn.Linear(2, 1)\nbuffer = io.BytesIO()\n"
                              "torch.save(model.state_dict(), buffer)\nbuffer.seek(0)\n"
                              "print(nn.Linear(2, 1).load_state_dict(torch.load(buffer)))\n")
    assert result["ok"], result["error"]
    assert result["steps"][-1]["stdout"] == "<All keys matched successfully>\n"
