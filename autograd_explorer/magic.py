"""``%%explore``: a notebook cell run traced, shown, and its variables left in the notebook.

The cell runs in a copy of the notebook's namespace (without IPython's own names: ``In``, ``Out``,
``_i3``…), so the trace shows the cell's tensors and those of earlier cells it can reach; it starts
with the playground's names (``torch``, ``nn``, ``F``, ``math``) where the notebook lacks them.
Afterwards every name the cell bound, rebound or deleted is bound, rebound or deleted in the notebook,
as a plain cell would have done; what it printed is printed.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

_IPYTHON_NAMES = re.compile(r"^(_+|_i+|_i?\d+|_oh|_ih|_dh|In|Out|exit|quit|get_ipython)$")
_MISSING = object()


@magics_class
class ExploreMagics(Magics):
    @magic_arguments()
    @argument("--cuda-on-cpu", action="store_true", help="run .cuda() / device='cuda' code on the CPU")
    @argument("--lang", default="en", help="the views' language: en or zh-CN")
    @argument("--title", default="", help="a title for the run")
    @cell_magic
    def explore(self, line: str, cell: str) -> None:
        """Run the cell traced and show it; its variables stay in the notebook."""
        from autograd_explorer import Run, _run

        options = parse_argstring(self.explore, line)
        user = self.shell.user_ns
        hidden = set(getattr(self.shell, "user_ns_hidden", {}))
        namespace = {name: value for name, value in user.items()
                     if name not in hidden and not _IPYTHON_NAMES.match(name)}
        before = dict(namespace)
        ran = _run(cell, options.cuda_on_cpu, None, namespace)
        _write_back(user, before, namespace)
        printed = "".join(step.stdout for step in ran.trace.steps)
        if ran.trace.error is not None:
            printed += ran.trace.error.output
        if printed:
            sys.stdout.write(printed)
        display(Run(ran, options.title, options.lang))


def _write_back(user: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> None:
    """Bind in the notebook what the cell bound or rebound, delete what it deleted. The names a
    snippet starts with (``torch``, ``nn``, ``F``, ``math``: the playground's) are the notebook's too
    from then on, as if the cell had imported them (an ``import torch`` in it binds the same object)."""
    for name, value in after.items():
        if name.startswith("__") and name.endswith("__"):
            continue
        if before.get(name, _MISSING) is value:
            continue
        user[name] = value
    for name in before:
        if name not in after:
            user.pop(name, None)


def register(ipython: Any) -> None:
    ipython.register_magics(ExploreMagics)
