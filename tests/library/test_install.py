"""Installing the project as a library where torch is installed already (as in Colab) keeps that
torch and brings no server package; the library then works from the wheel alone, outside the source
tree (its page's assets travel in the wheel: setup.py).

The fresh venv is given the project venv's torch 2.13.0 and the library's other dependencies as they
are (links to the installed distributions), and pip may fetch nothing (``--no-index``): a dependency
the wheel wrongly asked for (another torch, a server package) makes the install fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.browser_support import ROOT

pytestmark = pytest.mark.slow
SERVER = ("fastapi", "uvicorn", "psycopg", "psycopg-pool", "httpx", "limits", "redis", "starlette")
SOURCES = ("app", "autograd_explorer", "templates", "static", "pyproject.toml", "setup.py", "README.md")


def _closure(requirements: list[str]) -> set[str]:
    """The installed distributions ``requirements`` need, with theirs (markers for this platform)."""
    wanted = [Requirement(r) for r in requirements]
    seen: set[str] = set()
    while wanted:
        requirement = wanted.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        wanted += [Requirement(line) for line in metadata.requires(name) or []]
    return seen


def _lend(name: str, site: Path) -> None:
    """The installed distribution ``name``, linked into another venv's site-packages."""
    dist = metadata.distribution(name)
    here = Path(str(dist.locate_file("")))
    for top in sorted({Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}):
        if (here / top).exists() and not (site / top).exists():
            (site / top).symlink_to(here / top)


def test_pip_install_keeps_the_installed_torch_and_pulls_no_server(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "build"))
        else:
            shutil.copy(path, source / name)
    (source / "node_modules").mkdir()
    for module in (ROOT / "node_modules").glob("d3-*"):
        shutil.copytree(module, source / "node_modules" / module.name)
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "--no-index", "-q", "-w", str(wheels), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([str(python), "-c", where], capture_output=True, text=True,
                               check=True).stdout.strip())
    library = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    lent = _closure(library)
    assert "torch" in lent and not lent & set(SERVER)
    for name in lent:
        _lend(name, site)

    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
                                "--find-links", str(wheels), "autograd-explorer"],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "Requirement already satisfied: torch>=" in installed.stdout
    assert "Successfully installed autograd-explorer-" in installed.stdout
    assert (site / "torch").is_symlink()  # the torch that was there, untouched

    probe = ("import importlib.util, sys, torch, autograd_explorer as ax, app\n"
             "run = ax.trace('x = torch.ones(2, requires_grad=True)\\ny = (x * 3).sum()')\n"
             "page = run.html()\n"
             "assert 'data-role=\"packed-run\"' in page and 'd3' in page and run.ok\n"
             "assert '/site-packages/app/' in app.__file__, app.__file__\n"
             f"print(torch.__version__, [m for m in {SERVER!r}\n"
             "       if importlib.util.find_spec(m.replace('-', '_'))])")
    used = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert used.returncode == 0, used.stderr
    assert used.stdout.split()[0] == metadata.version("torch") and used.stdout.strip().endswith("[]")
    assert sysconfig.get_paths()["purelib"] != str(site)
