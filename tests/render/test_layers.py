"""The views and the detector sit side by side over the schema (docs/architecture.md): the views draw
the detector's answer as plain data (``app.diagnosis``) and the snippet's loops as ``app.snippet``
reads them, so neither package imports the other, and neither imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.browser_support import ROOT


@pytest.mark.parametrize(("package", "other"), [("app.render", "app.diagnostics"),
                                               ("app.diagnostics", "app.render")])
def test_each_side_imports_nothing_of_the_other(package: str, other: str) -> None:
    probe = (f"import importlib, pkgutil, sys, {package} as package\n"
             f"for found in pkgutil.walk_packages(package.__path__, '{package}.'):\n"
             "    importlib.import_module(found.name)\n"
             f"print(sorted(m for m in sys.modules if m == '{other}' or m.startswith('{other}.')"
             " or m.split('.')[0] == 'torch'))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
