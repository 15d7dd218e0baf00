"""What the user is told when a child's answer is unusable: the truth, never the OOM sentence (which
is kept for a child the kernel killed)."""

from __future__ import annotations

from sandbox_support import Server, assert_benign

# A frame that is not a trace, then the child lingers: the server must kill it itself.
UNUSABLE_THEN_LINGER = """\
import os, struct, time
body = b'{"ok": "not a bool", "steps": 7}'
for fd in map(int, os.listdir('/proc/self/fd')):
    try:
        if os.readlink(f'/proc/self/fd/{fd}').startswith('pipe:'):
            os.write(fd, struct.pack('>I', len(body)) + body)
            os.close(fd)
    except OSError:
        pass
time.sleep(30)
"""


def test_an_unusable_answer_is_called_that(ungated_server: Server) -> None:
    result = ungated_server.run(UNUSABLE_THEN_LINGER)
    error = result["error"]
    assert error["kind"] == "internal", error
    assert "unusable answer" in error["message"] and "memory" not in error["message"], error
    assert_benign(ungated_server)
