"""Plain torch, the oracle of the tutorial corpus: each snippet run as a learner runs it, no engine.

``python tests/sandbox/plain_torch.py`` reads ``{name: code}`` as JSON on stdin and writes ``{name:
{"output": ..., "error": [type, message] | null}}``. torch is imported once, then every snippet runs in
a forked child of its own (fresh state, as every sandboxed run gets), on one thread, with the seeds
the engine gives every run, its warnings shown on stderr as Python shows them, stdout and stderr in
one stream as the explorer collects them. Start it with the fork server's environment
(``app.sandbox.launch.fork_server_env``) so that torch picks the same kernels.
"""

from __future__ import annotations

import io
import json
import math
import os
import random
import sys
import warnings

import numpy  # noqa: F401 - loaded before the fork, as in the fork server
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

SNIPPET_FILENAME = "<snippet>"  # app.engine.tracer.SNIPPET_FILENAME: warnings name the same file


def run(code: str) -> dict:
    buffer = io.StringIO()
    sys.stdout = sys.stderr = buffer
    error = None
    torch.default_generator.manual_seed(0)  # app.engine.run: the seed of every run
    random.seed(0)
    namespace = {"__name__": "__main__", "torch": torch, "nn": nn, "F": F, "math": math}
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            exec(compile(code, SNIPPET_FILENAME, "exec", dont_inherit=True), namespace)  # noqa: S102
        except Exception as exc:  # noqa: BLE001 - the snippet's error is part of what it does
            error = [type(exc).__name__, str(exc)]
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    return {"output": buffer.getvalue(), "error": error}


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def main() -> None:
    snippets = json.load(sys.stdin)
    torch.set_num_threads(1)
    results = {}
    for name, code in snippets.items():
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            payload = json.dumps(run(code)).encode()
            with os.fdopen(write, "wb") as out:
                out.write(payload)
            os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as answer:
            data = answer.read()
        os.waitpid(pid, 0)
        results[name] = json.loads(data) if data else {"output": "", "error": ["Crash", "no answer"]}
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
