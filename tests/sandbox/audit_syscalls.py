"""The seccomp allow-list's audit: which system calls a sandboxed child makes for ordinary code.

    strace -f -ff -qq -o /tmp/audit/t .venv/bin/python tests/sandbox/audit_syscalls.py run
    .venv/bin/python tests/sandbox/audit_syscalls.py report /tmp/audit

``run`` sends a corpus through a real fork-server pool (policy gate on): every snippet the engine,
render and diagnostics tests run and the gallery (tests/golden/v1.jsonl.gz), the gate's teaching and
tutorial snippets (numpy included), the sandbox's benign run, forward-mode AD and the benchmark
snippets. ``report`` reads strace's per-process files and prints, for the children only, the calls made
after their own seccomp filter was loaded that the filter did not refuse: the candidates for
``app/sandbox/syscalls.py``. Hostile snippets are left out on purpose: what they need is what the
allow-list must not grant.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "sandbox")]


def corpus() -> list[str]:
    from test_policy import TEACHING
    from test_tutorial import FORWARD_AD, FUNC_JVP, NUMPY

    from app.bench.engine import CLONE_DETACH, TRAINING_LOOP
    from app.gallery import EXAMPLES

    with gzip.open(ROOT / "tests" / "golden" / "v1.jsonl.gz", "rt") as stream:
        golden = [json.loads(line)["source"] for line in stream]
    from sandbox_support import BENIGN

    extra = [BENIGN, FORWARD_AD, FUNC_JVP, NUMPY, CLONE_DETACH, TRAINING_LOOP]
    return list(dict.fromkeys([*golden, *(e.code for e in EXAMPLES), *TEACHING.values(), *extra]))


def run() -> None:
    from app.config import Settings
    from app.sandbox.pool import ForkServerPool

    pool = ForkServerPool(Settings(testing=True, unsafe_dev=True, wall_seconds=20, cpu_seconds=20))
    pool.start()
    codes = corpus()
    for index, code in enumerate(codes):
        result = pool.run_blocking(code)
        kind = result.error.kind if result.error else "ok"
        print(f"{index + 1}/{len(codes)} {kind}", file=sys.stderr)
    pool.close()


LINE = re.compile(r"^(?:\d+:\d+:\d+(?:\.\d+)? )?([a-z0-9_]+)\((.*)")


def report(folder: Path) -> None:
    seen: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    for path in sorted(folder.iterdir()):
        lines = path.read_text(errors="replace").splitlines()
        loads = [i for i, line in enumerate(lines)
                 if line.startswith("seccomp(SECCOMP_SET_MODE_FILTER") and line.rstrip().endswith("= 0")]
        start = loads[-1] if loads else None  # the last filter the child loaded (libseccomp probes first)
        if start is None:
            continue  # not a sandboxed child (the server, the fork server)
        for line in lines[start + 1:]:
            match = LINE.match(line)
            if not match:
                continue
            name = match.group(1)
            if re.search(r"= -1 (EPERM|EACCES|ENOSYS)", line):
                refused[name] += 1
            else:
                seen[name] += 1
    print("allowed and used:", " ".join(sorted(seen)))
    print("refused by the filter:", " ".join(f"{k}({v})" for k, v in sorted(refused.items())))


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run()
    else:
        report(Path(sys.argv[2]))
