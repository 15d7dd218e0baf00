"""Pure pieces of the sandbox: admission, exit-status classification, frames, seccomp rules."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import socket
import time

import pytest

from app.sandbox import frames, layers
from app.sandbox.admission import Admission
from app.sandbox.outcome import Limits, classify
from app.sandbox.seccomp import EACCES, ENOSYS, EPERM, Filters, Libseccomp, allow_rules, deny_rules
from tests.loop_support import run_in_own_loop

LIMITS = Limits(wall_seconds=5, cpu_seconds=5, memory_mib=512, max_result_bytes=1 << 20)


def _frame(payload: dict) -> bytes:
    return frames.encode_frame(json.dumps(payload).encode())


def test_admission_runs_queues_and_refuses() -> None:
    async def scenario() -> list[object]:
        gate = Admission(max_running=1, max_queued=1, wait_seconds=5)
        assert await gate.acquire()
        waiting = asyncio.ensure_future(gate.acquire())
        await asyncio.sleep(0.01)
        refused = await gate.acquire()  # one running, one queued: no room
        gate.release()  # the slot passes to the waiter
        granted = await waiting
        state = (gate.running, gate.queued)
        gate.release()
        return [refused, granted, state, gate.running]

    assert run_in_own_loop(scenario()) == [False, True, (1, 0), 0]


def test_admission_wait_is_bounded() -> None:
    async def scenario() -> tuple[bool, int]:
        gate = Admission(max_running=1, max_queued=4, wait_seconds=0.05)
        await gate.acquire()
        late = await gate.acquire()
        return late, gate.queued

    assert run_in_own_loop(scenario()) == (False, 0)


def test_classify_prefers_the_servers_own_evidence() -> None:
    answer = _frame({"ok": True, "steps": []})
    assert classify(answer, None, 0, 0.1, LIMITS).ok
    assert classify(answer, "deadline", None, 0.1, LIMITS).error.kind == "timeout"
    assert classify(b"x" * 100, "too_big", None, 0.1, LIMITS).error.kind == "output"
    killed = signal.SIGKILL  # wait status of a signalled process is the signal number
    assert classify(b"", None, killed, 5.2, LIMITS).error.kind == "timeout"  # CPU hard limit
    assert classify(b"", None, killed, 0.3, LIMITS).error.kind == "memory"  # the OOM killer
    assert classify(b"", None, signal.SIGXCPU, 5.0, LIMITS).error.kind == "timeout"
    assert classify(b"", None, signal.SIGSYS, 0.1, LIMITS).error.kind == "rejected"
    crash = classify(b"", None, signal.SIGSEGV, 0.1, LIMITS).error
    assert crash.kind == "runtime" and "SIGSEGV" in crash.message
    assert classify(b"", None, None, 0.1, LIMITS).error.kind == "internal"  # fork server died
    assert classify(b"", None, 3 << 8, 0.1, LIMITS).error.type == "ProcessExit"
    assert classify(b"", None, 71 << 8, 0.1, LIMITS).error.kind == "internal"


def test_classify_rejects_hostile_frames() -> None:
    good = _frame({"ok": True, "steps": []})
    for hostile in (
        good + b"trailing",
        good[:-1],
        b"\xff\xff\xff\xff" + b"x",
        _frame({"ok": "yes", "steps": 1}),
        frames.encode_frame(b"[" * 100_000),
        frames.encode_frame(b"\x00not json"),
    ):
        result = classify(hostile, None, 0, 0.1, LIMITS)
        assert result.error.kind == "internal", hostile[:40]


def test_frames_against_a_deadline() -> None:
    read, write = os.pipe()
    os.set_blocking(read, False)
    with pytest.raises(frames.Deadline):
        frames.read_frame_before(read, 100, deadline=0)
    os.write(write, frames.encode_frame(b"hello") + b"rest")
    assert frames.read_frame_before(read, 100, deadline=time.monotonic() + 60) == b"hello"
    os.close(write)
    assert frames.read_to_eof(read, 100, time.monotonic() + 60) == (b"rest", None)
    os.close(read)


def _answer_of(*payloads: bytes, trailing: bytes = b"", max_bytes: int = 1 << 20,
               seen: list[bytes] | None = None) -> tuple[bytes, str | None, bytes | None]:
    """``frames.read_answer`` over a pipe that holds ``payloads`` as frames (then ``trailing``)."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.write(write, b"".join(frames.encode_frame(p) for p in payloads) + trailing)
    os.close(write)
    try:
        return frames.read_answer(read, max_bytes, time.monotonic() + 60,
                                  (lambda body, _: seen.append(body)) if seen is not None else None)
    finally:
        os.close(read)


STEP = {"line": 1, "stdout": "x"}


def _trace_of(read_fd: int) -> dict:
    """The answer a child wrote on ``read_fd``, as the pool reads it (frames, then the reader's trace)."""
    from app.sandbox.runner import AnswerReader

    reader = AnswerReader()
    data, stopped, envelope = frames.read_answer(read_fd, 1 << 20, time.monotonic() + 30, reader.add)
    assert stopped is None and data == b"" and envelope is not None
    return reader.result(envelope).model_dump()


def test_an_answer_in_frames_is_its_steps_then_its_envelope() -> None:
    envelope = json.dumps({"format": "delta", "ok": True, "truncated": False, "error": None}).encode()
    first, second = json.dumps([STEP, STEP]).encode(), json.dumps([{**STEP, "line": 2}]).encode()
    seen: list[bytes] = []
    data, stopped, last = _answer_of(first, b"[]", second, envelope, seen=seen)
    # each frame of steps handed on as it came (an empty one is none), then the envelope alone
    assert (data, stopped, last) == (b"", None, envelope) and seen == [first, second]
    assert _answer_of(b"{}") == (b"", None, b"{}")


def test_an_answer_that_is_not_steps_then_one_envelope_is_unusable() -> None:
    envelope = json.dumps({"ok": True, "error": None}).encode()
    steps = json.dumps([STEP]).encode()
    for payloads, trailing in (
        ((steps, json.dumps({"ok": True, "steps": [STEP]}).encode()), b""),  # steps in the envelope
        ((steps, envelope), b"more"),  # bytes after the envelope
        ((steps, envelope, steps), b""),  # a frame after it
        ((steps,), b""),  # no envelope at all
        ((steps, b"[1, 2"), b""),  # neither an array nor an object
        ((steps, envelope[:-1]), b""),
    ):
        data, stopped, last = _answer_of(*payloads, trailing=trailing)
        assert stopped is None and last is None
        result = classify(data, None, 0, 0.1, LIMITS)
        assert result.error is not None and result.error.kind == "internal", (payloads, trailing)
    data, stopped, _ = _answer_of(steps, steps, envelope, max_bytes=len(steps) + 4)
    assert stopped == "too_big"


def test_the_result_stream_cuts_at_the_cap_and_says_where() -> None:
    """Steps past the cap are dropped, whether they came in one frame or many, and the envelope
    names the first one dropped."""
    from app.sandbox.child import ResultStream

    step = {"line": 1, "stdout": "y" * 1000}
    answers = []
    for flush_every in (None, 1, 7):
        read, write = os.pipe()
        os.set_blocking(read, False)
        stream = ResultStream(write, 8192 + 10 * 1010)
        steps: list[dict] = []
        for index in range(30):
            steps.append(step)
            if flush_every is not None and index % flush_every == 0:
                stream.flush(steps)
        stream.finish({"ok": True, "truncated": False, "error": None, "steps": steps})
        os.close(write)
        answers.append(_trace_of(read))
        os.close(read)
    assert answers[0] == answers[1] == answers[2]
    answer = answers[0]
    assert not answer["ok"] and answer["truncated"] and len(answer["steps"]) == 9
    assert answer["error"]["code"] == "output.trace_cut" and answer["error"]["params"]["steps"] == 9


def test_a_stop_inside_a_flush_loses_and_repeats_no_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop that lands while a frame's steps are encoded (the snippet's own alarm): the answer the
    child writes next (``_answer_now``) still has every step once, and counts none of them twice
    against the cap (here: room for exactly the eight steps)."""
    from app.sandbox import child

    class Stop(BaseException):
        pass

    read, write = os.pipe()
    os.set_blocking(read, False)
    steps = [{"line": n, "stdout": ""} for n in range(1, 9)]
    stream = child.ResultStream(write, 8192 + sum(len(child._encode(step)) + 1 for step in steps))
    stream.flush(steps[:3])
    encode, calls = child._encode, []

    def stopped_at_the_second(value: object) -> bytes:
        calls.append(value)
        if len(calls) == 2:
            raise Stop
        return encode(value)

    monkeypatch.setattr(child, "_encode", stopped_at_the_second)
    with pytest.raises(Stop):
        stream.flush(steps[:6])
    monkeypatch.setattr(child, "_encode", encode)
    stream.finish({"ok": True, "truncated": False, "error": None, "steps": steps})
    os.close(write)
    answer = _trace_of(read)
    os.close(read)
    assert [step["line"] for step in answer["steps"]] == list(range(1, 9)) and answer["error"] is None


def test_deny_rules_cover_the_issue() -> None:
    rules = deny_rules(own_pid=1234)
    by_name: dict[str, set[int]] = {}
    for rule in rules:
        by_name.setdefault(rule.syscall, set()).add(rule.action)
    for name in (
        "socket",
        "connect",
        "execve",
        "fork",
        "vfork",
        "ptrace",
        "process_vm_readv",
        "unshare",
        "setns",
        "mount",
        "io_uring_setup",
        "bpf",
        "perf_event_open",
        "memfd_create",
        "kill",
        "tgkill",
    ):
        assert EPERM in by_name[name], name
    for name in ("open", "openat", "unlink", "rename", "mkdir", "symlink", "link", "truncate", "chmod"):
        assert EACCES in by_name[name], name
    assert by_name["clone3"] == {0x00050000 | errno.ENOSYS}
    kill = next(r for r in rules if r.syscall == "kill")
    assert kill.conditions == ((0, 1, 1234, 0),)  # arg0 != own pid


def test_filters_compiled_ahead_are_the_ones_a_child_would_compile() -> None:
    """The fork server compiles both filters once; a child fills its own pid into the deny-list's
    program. That program is byte for byte what libseccomp compiles for the pid, whatever the pid."""
    libseccomp = Libseccomp()
    filters = Filters(libseccomp)
    assert filters.deny is not None  # the fast path is taken here (else every child compiles its own)
    assert filters.allow == libseccomp.compile(allow_rules(), default=ENOSYS)[0]
    for pid in (1, 2, 77, 1234, 65535, 4_194_304, os.getpid()):
        assert filters.deny_for(pid) == libseccomp.compile(deny_rules(pid))[0], pid
    assert filters.deny_for(1234) != filters.deny_for(1235)


def test_an_installed_filter_refuses_what_it_lists() -> None:
    """A child installs the compiled programs with one seccomp() call each (in a forked process here):
    signals to another pid, sockets, writes and new processes are refused with the listed errors."""
    filters = Filters(Libseccomp())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        outcome = {}
        try:
            os.close(read)
            layers.prctl(layers.PR_SET_NO_NEW_PRIVS, 1)
            outcome["rules"] = filters.install(os.getpid())
            for name, action in (("kill other", lambda: os.kill(os.getppid(), 0)),
                                 ("kill self", lambda: os.kill(os.getpid(), 0)),
                                 ("socket", lambda: socket.socket().close()),
                                 ("write", lambda: open("/tmp/seccomp-probe", "w").close()),  # noqa: SIM115
                                 ("fork", lambda: os._exit(0) if os.fork() == 0 else None)):
                try:
                    action()
                    outcome[name] = "allowed"
                except OSError as error:
                    outcome[name] = errno.errorcode.get(error.errno or 0, "?")
            outcome["mode"] = layers.status_fields().get("Seccomp")
        finally:
            os.write(write, json.dumps(outcome).encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        outcome = json.loads(answer.read())
    os.waitpid(pid, 0)
    assert outcome == {"rules": filters.rules, "kill other": "EPERM", "kill self": "allowed",
                       "socket": "EPERM", "write": "EACCES", "fork": "EPERM", "mode": "2"}, outcome


def test_the_unconfined_runner_needs_the_explicit_dev_override(tmp_path) -> None:
    from app.config import Settings
    from app.sandbox.runner import SubprocessRunner
    from app.sandbox.runners import default_runner

    with pytest.raises(RuntimeError, match="EXPLORER_UNSAFE_DEV"):
        default_runner(Settings(sandbox="subprocess", data_dir=tmp_path))
    runner = default_runner(Settings(sandbox="subprocess", unsafe_dev=True, data_dir=tmp_path))
    assert isinstance(runner, SubprocessRunner) and runner.health()["unsafe_dev"] is True


def test_a_memory_error_out_of_the_job_is_answered_as_the_memory_limit() -> None:
    """A MemoryError that escapes the job (the engine's answer itself did not fit) still gets the
    server a well-formed answer that names the limit — read as the pool reads any answer."""
    from app.sandbox.child import _answer_memory
    from app.sandbox.layers import ChildConfig

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # it ends its process, as it ends a child
        os.close(read_fd)
        _answer_memory(write_fd, ChildConfig(memory_mib=300))
        os._exit(99)  # not reached
    os.close(write_fd)
    try:
        trace = _trace_of(read_fd)
    finally:
        os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    error = trace["error"]
    assert error is not None and (error["kind"], error["code"]) == ("memory", "memory.limit")
    assert "300" in error["message"]
    assert not trace["ok"] and trace["truncated"] and trace["steps"] == []
