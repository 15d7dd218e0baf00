"""``python -m app.sandbox.worker``: read a job (JSON) on stdin, write one result frame on stdout.

The job is ``{"code": str, "max_steps": int, "max_stdout": int, "cuda_on_cpu": bool}``.
"""

from __future__ import annotations

import json
import os
import sys

from app.engine import EngineLimits, trace_delta
from app.sandbox.frames import encode_frame


def run_job(job: dict) -> bytes:
    limits = EngineLimits(max_steps=int(job["max_steps"]), max_stdout=int(job["max_stdout"]),
                          cuda_on_cpu=bool(job.get("cuda_on_cpu", False)))
    result = trace_delta(str(job["code"]), limits)
    return json.dumps(result, allow_nan=False, separators=(",", ":")).encode()


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    # The snippet's prints are captured by the engine; the real stdout carries only the frame.
    out = os.dup(1)
    payload = encode_frame(run_job(job))
    with os.fdopen(out, "wb") as stream:
        stream.write(payload)
        stream.flush()


if __name__ == "__main__":
    main()
