"""The image as built: how it is configured, and the Dockerfile's pins (the last needs no Docker)."""

from __future__ import annotations

import ast
import json
import re
import sys
import tomllib
from importlib import metadata

from dockerkit import ROOT, Image, docker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def test_dockerfile_torch_pin_matches_pyproject() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    pinned = re.search(r"^ARG TORCH_VERSION=(\S+)$", dockerfile, re.M)
    deps = _image_dependencies()
    assert pinned is not None
    assert f"torch=={pinned.group(1)}" in deps
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim-bookworm$", dockerfile, re.M)
    assert re.search(r"^ARG TORCH_INDEX_URL=https://download\.pytorch\.org/whl/cpu$", dockerfile, re.M)


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "node_modules", "data"} <= ignored


def test_image_runs_as_non_root_on_port_8000_with_healthcheck_and_data_volume(image: Image) -> None:
    config = json.loads(docker("image", "inspect", "--format", "{{json .Config}}", image.tag).stdout)
    assert config["User"] not in ("", "0", "root") and not config["User"].startswith("0:")
    assert "8000/tcp" in config["ExposedPorts"]
    assert "/data" in config["Volumes"]
    assert config["Healthcheck"]["Test"][0] == "CMD"
    assert config["Cmd"] == ["python", "-m", "app", "serve", "--host", "0.0.0.0", "--port", "8000"]
    assert config["Entrypoint"] == ["dumb-init", "--"]  # PID 1 reaps orphans and forwards signals
    assert "EXPLORER_DATA_DIR=/data" in config["Env"]


def test_image_has_cpu_torch_libseccomp_and_the_front_end(image: Image) -> None:
    probe = (
        "import ctypes, os, torch; ctypes.CDLL('libseccomp.so.2'); "
        "assert torch.__version__.endswith('+cpu') or not torch.backends.cuda.is_built(), torch.__version__; "
        "assert os.path.isfile('node_modules/htmx.org/package.json'); "
        "assert os.path.getsize('static/build/page.js') > 100_000; "  # CodeMirror, bundled in the image
        "assert not os.path.exists('node_modules/esbuild'); "
        "assert not os.access('app', os.W_OK); print(os.getuid())"
    )
    done = docker("run", "--rm", "--entrypoint", "python", image.tag, "-W", "ignore", "-c", probe,
                  timeout=120)
    assert done.stdout.strip() == "10001"


def _image_dependencies() -> list[str]:
    """What the image installs (Dockerfile): the library's dependencies and the server extra's."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + project["optional-dependencies"]["server"]


def _declared_closure() -> set[str]:
    """Distributions the image installs: pyproject's dependencies and everything they require."""
    wanted = [Requirement(dep) for dep in _image_dependencies()]
    seen: set[str] = set()
    while wanted:
        requirement = wanted.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            nested = Requirement(line)
            extras = requirement.extras or {""}
            if nested.marker is None or any(nested.marker.evaluate({"extra": e}) for e in extras):
                wanted.append(nested)
    return seen


def _guarded_imports(tree: ast.AST) -> set[int]:
    """Imports inside ``try: ... except ImportError`` are optional by design (the browser benchmark's
    playwright, a test extra): the code says what is missing instead of crashing."""
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        caught = {
            name.id
            for handler in node.handlers
            for name in ast.walk(handler.type) if handler.type is not None and isinstance(name, ast.Name)
        }
        if caught & {"ImportError", "ModuleNotFoundError"}:
            guarded |= {id(inner) for statement in node.body for inner in ast.walk(statement)
                        if isinstance(inner, ast.Import | ast.ImportFrom)}
    return guarded


def test_every_third_party_import_of_the_app_is_declared_in_pyproject() -> None:
    """The image installs pyproject.toml's dependencies only: a missing one crashes the container."""
    installed = metadata.packages_distributions()
    declared = _declared_closure()
    missing = set()
    for path in (ROOT / "app").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        optional = _guarded_imports(tree)
        for node in ast.walk(tree):
            if id(node) in optional:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("app", "autograd_explorer"):  # ours
                    continue
                distributions = {canonicalize_name(d) for d in installed.get(top, [top])}
                if not distributions & declared:
                    missing.add(f"{top} (imported by {path.relative_to(ROOT)})")
    assert not missing, f"not in pyproject.toml's dependencies: {sorted(missing)}"
