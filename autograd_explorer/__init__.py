"""Autograd Explorer as a library: see what a PyTorch snippet does to memory and to the autograd
graph, line by line, in a notebook, a script or a terminal.

    import autograd_explorer as ax
    run = ax.trace("x = torch.ones(3, requires_grad=True)\\ny = (x * 2).sum()\\ny.backward()")
    run              # in a notebook: the memory view, the graph, the stepper, the diagnostics
    run.save("run.html")   # the same page, one file that works offline
    print(run.text())      # a text view per step
    ax.show(code)          # trace and display in one call

    %load_ext autograd_explorer
    %%explore              # a cell run traced, shown, its variables left in the notebook

A thin layer over the web server's own pipeline (``app``): the same engine, limits, diagnostics and
views, run in this process (``app.local``) — your code on your machine, so there is no sandbox.
Importing it never imports the web server (FastAPI, uvicorn).
"""

from __future__ import annotations

from typing import Any

from app.local import LocalRun, run_here
from app.render.notices import RunLimits
from app.report import RenderedRun
from app.schema import DeltaTrace, Diagnostic, MemoryChange
from app.trace.gpu import GpuPoint

__all__ = ["Limits", "Run", "load_ipython_extension", "show", "trace"]

Limits = RunLimits  # max_steps, wall_seconds, max_result_bytes, max_stdout_bytes (the server's defaults)


class Run:
    """One traced run. In a notebook it shows itself (``_repr_mimebundle_``): the interactive page
    (``text/html``, every script inline, in its own frame), the picture of its last step
    (``image/svg+xml``, for viewers that run no script) and a summary (``text/plain``)."""

    def __init__(self, ran: LocalRun, title: str = "", lang: str = "en") -> None:
        self._ran = ran
        self._rendered = RenderedRun(ran.trace, ran.code, ran.limits, title, ran.measured, lang)

    # ---- what happened ---------------------------------------------------------------------------
    @property
    def code(self) -> str:
        return self._ran.code

    @property
    def trace(self) -> DeltaTrace:
        """The delta trace (``app.schema.DeltaTrace``): each step holds what its line changed."""
        return self._ran.trace

    @property
    def ok(self) -> bool:
        return self._ran.trace.ok

    @property
    def steps(self) -> int:
        return len(self._ran.trace.steps)

    @property
    def output(self) -> str:
        """Everything the code printed."""
        return "".join(step.stdout for step in self._ran.trace.steps)

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """The pitfalls found (the playground's diagnostics panel)."""
        return self._rendered.diagnostics

    @property
    def memory(self) -> list[MemoryChange]:
        """Per step: bytes held through variables, held only by the graph, shared."""
        return self._rendered.memory

    @property
    def gpu(self) -> tuple[GpuPoint, ...]:
        """Per step: what a CUDA device would report for these storages (``memory_allocated``,
        ``memory_reserved``), a model of PyTorch's caching allocator (``app.trace.gpu``)."""
        return self._rendered.view.gpu

    @property
    def measured(self) -> tuple[int, ...] | None:
        """Per step: ``torch.cuda.memory_allocated()`` as measured, when the code ran on CUDA."""
        return self._ran.measured

    # ---- what it looks like --------------------------------------------------------------------
    def html(self) -> str:
        """The standalone page: memory view, graph, stepper, diagnostics; works offline."""
        return self._rendered.html

    def svg(self, step: int | None = None, view: str = "both", theme: str = "light") -> str:
        """The picture of one step (1-based; default: the last), as ``/render.svg`` draws it."""
        return self._rendered.svg(None if step is None else step - 1, view, theme)

    def text(self) -> str:
        """A text view per step: variables, shared storages, versions, grad_fn chains, findings."""
        return self._rendered.text()

    def to_json(self) -> str:
        """The delta trace with its diagnostics and memory, as ``POST /api/run`` answers it."""
        return self._rendered.json()

    def save(self, path: Any) -> None:
        """Write the run: ``.html`` (the standalone page), ``.svg``, ``.txt`` or ``.json``."""
        from pathlib import Path

        target = Path(path)
        kind = target.suffix.lstrip(".").lower()
        target.write_text(self._rendered.as_format(kind), encoding="utf-8")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/html": self._rendered.frame(), "image/svg+xml": self.svg(),
                "text/plain": self._rendered.summary()}

    def __repr__(self) -> str:
        return self._rendered.summary()


def trace(code: str, *, cuda_on_cpu: bool = False, limits: RunLimits | None = None, title: str = "",
          lang: str = "en") -> Run:
    """Run ``code`` here, traced, and return the run. ``cuda_on_cpu``: code written for a GPU
    (``.cuda()``, ``.to("cuda")``, ``device="cuda"``) runs on the CPU, shown as what it asked for;
    ``limits``: the server's by default; ``lang``: the views' language (``en``, ``zh-CN``)."""
    return Run(_run(code, cuda_on_cpu, limits, None), title, lang)


def show(code: str, **options: Any) -> None:
    """``trace(code, **options)`` and display it (in a notebook; elsewhere, print its summary)."""
    run = trace(code, **options)
    try:
        from IPython.display import display
    except ImportError:
        print(run)
        return
    display(run)


def _run(code: str, cuda_on_cpu: bool, limits: RunLimits | None,
         namespace: dict[str, Any] | None) -> LocalRun:
    return run_here(code, limits, namespace, cuda_on_cpu)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext autograd_explorer``: the ``%%explore`` cell magic."""
    from autograd_explorer.magic import register

    register(ipython)
