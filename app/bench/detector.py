"""The pitfall detector against its labelled corpus (``tests/diagnostics/corpus``, issue 26): how often
it is right, per case and per rule.

Every case is traced by the engine (in one child process: the analysis runs where torch is not
imported, as the server's does) and analysed; ``corpus/score.py`` judges the findings against the
labels — rule, severity, line, and a fix that names the right remedy; a twin or a look-alike must be
quiet. Rows: cases right (per kind and in all), then per rule its precision (of what it said, how
much a label asked for) and recall (of what the labels ask, how much it said), with the counts.
Targets: no case wrong, no false alarm, no miss.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from app.bench import Row
from app.diagnostics import diagnose
from app.schema import DeltaTrace

ROOT = Path(__file__).resolve().parents[2]


def traces(codes: list[str]) -> list[DeltaTrace]:
    """The engine's traces of ``codes``, made in one child process."""
    program = ("import json, sys\nfrom app.engine import trace_delta\n"
               "print(json.dumps([trace_delta(code) for code in json.load(sys.stdin)]))")
    done = subprocess.run([sys.executable, "-c", program], input=json.dumps(codes), capture_output=True,
                          text=True, check=True, cwd=ROOT)
    return [DeltaTrace.model_validate(trace) for trace in json.loads(done.stdout)]


def run() -> list[Row]:
    sys.path.insert(0, str(ROOT))
    try:
        from tests.diagnostics.corpus.cases import CASES
        from tests.diagnostics.corpus.score import judge, per_rule
    except ImportError:  # an install without the repository's tests: nothing to judge against
        print("[detector] the corpus (tests/diagnostics/corpus) is not here: skipped", file=sys.stderr)
        return []
    verdicts = [judge(case, diagnose(trace, case.code))
                for case, trace in zip(CASES, traces([case.code for case in CASES]), strict=True)]
    rows: list[Row] = []
    kinds = Counter(v.case.kind for v in verdicts)
    wrong = Counter(v.case.kind for v in verdicts if not v.right)
    for kind in ("leak", "cut", "alias", "error", "accumulate", "stale", "cleared", "twin", "lookalike"):
        rows.append(Row("detector", f"{kind} cases ({kinds[kind]})", "wrong", wrong[kind], "cases", 0))
    rows.append(Row("detector", f"all cases ({len(verdicts)})", "wrong", sum(wrong.values()), "cases", 0))
    for rule, score in per_rule(verdicts).items():
        case = f"{rule} ({score.true} right, {score.false} false, {score.missed} missed)"
        if score.precision is not None:
            rows.append(Row("detector", case, "precision", 100 * score.precision, "%"))
        if score.recall is not None:
            rows.append(Row("detector", case, "recall", 100 * score.recall, "%"))
        rows.append(Row("detector", rule, "false alarms + misses", score.false + score.missed, "", 0))
    for verdict in verdicts:
        if not verdict.right:
            print(f"[detector] {verdict.case.name}: {verdict.why()}", file=sys.stderr)
    return rows
