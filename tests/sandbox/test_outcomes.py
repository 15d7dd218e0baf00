"""What the user is told when a child's answer is unusable: the truth, never the OOM sentence (which
is kept for a child the kernel killed)."""

from __future__ import annotations

from sandbox_support import Server, assert_benign

# The child's own answer, forged: ``body`` written as a frame on every pipe it holds (its result pipe
# is one of them), which is then closed.
SEND_BODY = """\
for fd in map(int, os.listdir('/proc/self/fd')):
    try:
        if os.readlink(f'/proc/self/fd/{fd}').startswith('pipe:'):
            os.write(fd, struct.pack('>I', len(body)) + body)
            os.close(fd)
    except OSError:
        pass
"""

# A frame that is not a trace, then the child lingers: the server must kill it itself.
UNUSABLE_THEN_LINGER = """\
import os, struct, time
body = b'{"ok": "not a bool", "steps": 7}'
""" + SEND_BODY + "time.sleep(30)\n"


def test_an_unusable_answer_is_called_that(ungated_server: Server) -> None:
    result = ungated_server.run(UNUSABLE_THEN_LINGER)
    error = result["error"]
    assert error["kind"] == "internal", error
    assert "unusable answer" in error["message"] and "memory" not in error["message"], error
    assert_benign(ungated_server)


# A schema-valid trace whose parts disagree (values nested against the shape, a name for a tensor that
# is not there), written by the child itself over its own answer, which it then never sends.
FORGED_THEN_EXIT = """\
import json, os, struct
tensor = {"shape": [2, 3], "dtype": "float32", "stride": [3, 1], "storage_offset": 0, "storage": "s1",
          "requires_grad": False, "is_leaf": True, "grad_fn": None, "grad": None, "base": None,
          "version": 0, "values": [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]}
good = {"line": 1, "variables": {"x": "t1"}, "tensors": {"t1": tensor},
        "storages": {"s1": {"nbytes": 24, "element_size": 4, "values": [1.0] * 6}}}
bad = {"line": 2, "tensors": {"t1": {**tensor, "values": [1.0, 2.0]}}, "variables": {"y": "t9"}}
body = json.dumps({"format": "delta", "ok": True, "steps": [good, bad]}).encode()
""" + SEND_BODY + "os._exit(0)\n"


def test_a_forged_trace_from_a_real_child_is_an_unusable_answer(ungated_server: Server) -> None:
    result = ungated_server.run(FORGED_THEN_EXIT)
    error = result["error"]
    assert error["type"] == "UnusableAnswer" and error["kind"] == "internal", error
    said = "unusable answer: step 2: tensor t1's values are not nested as its shape"
    assert said in error["message"], error
    assert len(result["steps"]) == 1 and result["steps"][0]["variables"] == {"x": "t1"}
    client = ungated_server.client
    v1 = client.post("/api/run", json={"code": FORGED_THEN_EXIT})
    page = client.post("/run", data={"code": FORGED_THEN_EXIT})
    assert v1.status_code == 200 and v1.json()["error"]["type"] == "UnusableAnswer", v1.text[:500]
    assert page.status_code == 200 and "unusable answer" in page.text
    assert_benign(ungated_server)
