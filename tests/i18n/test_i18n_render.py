"""The run in Chinese: memory, variables, facts, folds, notices and the picture say nothing of ours
in English. On every golden trace (which between them draw every group, fold, row and label), the
Chinese fragment (``_run.html``), the strings ``static/explorer.js`` shows from its payload, and the
``/render.svg`` picture hold no English sentence except what the user brought (the code, what it
printed) and what torch wrote (its exception text, kept as torch wrote it). Every way a run can end
early is said in Chinese too. The English is pinned by tests/render (and is byte-identical to the
untranslated render: every golden fragment, payload and picture compared when this was written)."""

from __future__ import annotations

import re

import pytest

from app import i18n
from app.gallery import EXAMPLES
from app.render.notices import RunLimits
from app.render.svg import render_svg
from app.schema import DeltaTrace, RunError
from app.trace.delta import compress
from app.web.pages import render, run_context
from tests.golden import load
from tests.i18n.english import english_phrases

GOLDEN = list(load())
PYTHON_VALUES = {"T", "F", "True", "False", "None"}  # a boolean tensor's cells, as torch prints them


def _visible(html: str) -> str:
    html = re.sub(r"<(script|style|textarea|code|pre)\b.*?</\1>", " ", html, flags=re.S)
    labels = " ".join(re.findall(r'(?:title|aria-label|placeholder|alt)="([^"]*)"', html))
    return re.sub(r"<[^>]+>", " ", html) + " " + labels


def _shown_by_script(payload: dict) -> list[str]:
    """What explorer.js writes from the payload: texts of every step, facts rows, fold members."""
    texts = [f"{label} {text}" for label, text in payload["pairs"]]
    texts += [str(run[2]) for _, runs in payload["text"] for run in runs if len(run) > 2]
    texts += [entry[0] for _, entries in payload["folds"] for entry in entries]
    return texts


def _ours(phrases: list[str], brought: str) -> list[str]:
    return [p for p in phrases if p not in brought and not set(p.split()) <= PYTHON_VALUES]


def _english_left(trace: DeltaTrace, code: str) -> list[str]:
    with i18n.use_locale("zh_CN"):
        context = run_context(trace, code, None, RunLimits())
        view = context["view"]
        texts = [_visible(render("_run.html", **context)), *_shown_by_script(context["payload"])]
        steps = {0, max(view.step_count - 1, 0)}
        texts += [re.sub(r"<[^>]+>", " ", render_svg(view, step)) for step in steps]
    error = trace.error
    # the user's own words, and torch's (an error our code did not write has no code)
    brought = code + view.stdout + (error.message + (error.output or "") if error and not error.code else "")
    return sorted({p for text in texts for p in _ours(english_phrases(text), brought)})


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.name for g in GOLDEN])
def test_the_run_reads_in_chinese(golden) -> None:  # noqa: ANN001
    assert _english_left(DeltaTrace.model_validate(compress(golden.result)), golden.source) == []


LEAK = next(e for e in EXAMPLES if e.slug == "losses-keep-graphs")
BASE = next(g for g in GOLDEN if g.source == LEAK.code)  # a loop keeping its losses: every group drawn


def _ending(**changes) -> DeltaTrace:  # noqa: ANN003
    data = compress(BASE.result)
    data.update(changes)
    return DeltaTrace.model_validate(data)


def _error(kind: str, type_: str, **more) -> dict:  # noqa: ANN003
    return RunError(kind=kind, type=type_, message="(English text the sandbox wrote)", **more).model_dump()


ENDINGS = {
    "steps": ({"truncated": True}, "10,000 步的上限"),
    "wall": ({"error": _error("timeout", "Timeout", code="timeout.wall", params={"seconds": 5.0})},
             "5 秒时限"),
    "cpu": ({"error": _error("timeout", "CpuTimeout")}, "5 秒 CPU 时间上限"),
    "size": ({"truncated": True, "error": _error("output", "ResultTooLarge")}, "8.0 MiB 的大小上限"),
    "printed": ({"error": _error("output", "OutputLimitReached")}, "64.0 KiB 的上限"),
    "memory": ({"error": _error("memory", "MemoryError")}, "512 MiB"),
    "untraced": ({"error": _error("untraced", "Untraced")}, "追踪器无法跟踪"),
    "restarted": ({"error": _error("internal", "SandboxError", code="internal.restarted")}, "请"),
    "syntax": ({"error": _error("rejected", "SyntaxError", code="rejected.no_code", line=1)},
               "Python 无法读懂"),
    "crash": ({"error": _error("runtime", "RuntimeError", line=3, output="partial\n")}, "出错前打印的内容"),
}


@pytest.mark.parametrize("name", ENDINGS)
def test_every_ending_is_said_in_chinese(name: str) -> None:
    changes, expected = ENDINGS[name]
    trace = _ending(ok=False, **changes) if "error" in changes else _ending(**changes)
    with i18n.use_locale("zh_CN"):
        fragment = render("_run.html", **run_context(trace, BASE.source, None, RunLimits()))
    assert expected in fragment
    left = _english_left(trace, BASE.source)
    if trace.error is not None and not trace.error.code:  # our stand-in for torch's words: kept as written
        left = [p for p in left if p not in "English text the sandbox wrote"]
    assert left == []


def test_the_engines_reading_limits_are_said_in_chinese() -> None:
    data = compress(BASE.result)
    data["steps"][2]["capped"] = {"tensors": 10_000, "depth": 4}
    trace = DeltaTrace.model_validate(data)
    with i18n.use_locale("zh_CN"):
        caps = run_context(trace, BASE.source, None, RunLimits())["view"].caps
    assert caps.text == ("从第 3 步起，代码持有的内容没有全部显示：容器最多读取 4 层深；"
                         "每步最多读取 10,000 个张量。运行本身没有受影响。")
    english = run_context(trace, BASE.source, None, RunLimits())["view"].caps.text
    assert english == ("Not everything the snippet holds is shown from step 3 on: containers are read 4 "
                       "levels deep; at most 10,000 tensors are read per step. The run itself was not "
                       "changed.")
