"""``python -m app render FILE -o OUT``: the three formats on every gallery example, and the text view
read back against the trace it was made from."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.__main__ import main
from app.diagnostics import analysis
from app.gallery import EXAMPLES
from app.local import run_here
from app.textview import text_view
from app.trace.replay import replay
from tests.browser_support import ROOT

HEAD = re.compile(r"^step (\d+) · line (\d+)(?: · (.*))?$")


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.slug for e in EXAMPLES])
def test_the_three_formats_of_a_gallery_example(example, tmp_path: Path) -> None:  # noqa: ANN001
    source = tmp_path / f"{example.slug}.py"
    source.write_text(example.code)
    for suffix in ("txt", "svg", "html"):
        status = main(["render", str(source), "-o", str(tmp_path / f"out.{suffix}")])
        assert status in (0, 1)
    text = (tmp_path / "out.txt").read_text()
    assert text.startswith(f"Autograd Explorer · {example.slug}.py · ")
    svg = (tmp_path / "out.svg").read_text()
    assert svg.lstrip().startswith(("<svg", "<?xml")) and "<script" not in svg
    page = (tmp_path / "out.html").read_text()
    assert page.startswith("<!doctype html>") and 'data-role="packed-run"' in page


@pytest.mark.parametrize("example", EXAMPLES[::3], ids=[e.slug for e in EXAMPLES[::3]])
def test_the_text_view_says_what_the_trace_holds(example) -> None:  # noqa: ANN001
    ran = run_here(example.code)
    trace = ran.trace
    text = text_view(trace, example.code, ran.limits)
    found, _memory = analysis(trace, example.code)
    blocks: list[tuple[re.Match, list[str]]] = []
    for line in text.split("\n")[1:]:
        head = HEAD.match(line)
        if head:
            blocks.append((head, []))
        elif blocks and line.startswith("  "):
            blocks[-1][1].append(line.strip())
    assert [int(head.group(1)) for head, _ in blocks] == list(range(1, len(trace.steps) + 1))
    for (head, body), (state, changes) in zip(blocks, replay(trace), strict=True):
        delta = changes.delta
        assert int(head.group(2)) == delta.line
        for name, tid in delta.variables.items():  # every name the line bound, with its dtype and shape
            fact = state.tensors[tid]
            said = [b for b in body if b.startswith(f"{name} = ")]
            assert said, (name, body)
            assert said[0].startswith(f"{name} = {fact.dtype}[{', '.join(map(str, fact.shape))}]")
            assert ("grad_fn " in said[0]) == (fact.grad_fn is not None)
            assert f" · v{fact.version}" in said[0] or fact.version is None
        for name in delta.dropped.variables:
            assert f"{name} unbound" in body
        moved = sum(1 for tid, old in changes.old_tensors.items()
                    if old is not None and tid in state.tensors and old.version != state.tensors[tid].version)
        assert sum(1 for b in body if "_version " in b and " → " in b) == moved
        here = [d for d in found if d.step == changes.index]
        assert sum(1 for b in body if b.startswith("! ")) == len(here)
        for finding in here:
            assert any(f"[{finding.rule}]" in b for b in body)


def test_the_command_line_itself(tmp_path: Path) -> None:
    source = tmp_path / "leak.py"
    source.write_text("xs = []\nfor i in range(3):\n    xs.append(torch.ones(2, requires_grad=True) * i)\n")
    done = subprocess.run([sys.executable, "-m", "app", "render", str(source), "-o", "-"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Autograd Explorer · leak.py · 8 steps · finished\n")
    assert "xs[2] = float32[2] · grad_fn MulBackward0" in done.stdout


def test_an_output_of_no_known_format_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "x.py"
    source.write_text("x = torch.ones(2)\n")
    assert main(["render", str(source), "-o", str(tmp_path / "out.png")]) == 2
    assert "name it .html, .svg or .txt" in capsys.readouterr().err
    assert not (tmp_path / "out.png").exists()
