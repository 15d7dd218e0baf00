"""The policy gate: a check of the parsed snippet before it runs, for clear early messages.

It is *not* the security boundary (``torch.os`` reaches the OS with no import and no underscore; the
sandbox's OS layers hold on their own, and the attack suite proves it by running with this gate off).
It shrinks the surface and tells a learner, with a line number, why a snippet will not run here.

It works on the tree, never on the text: the parser already folds full-width letters (NFKC), so
``__ｃｌａｓｓ__`` arrives here as ``__class__``. Pure ``ast``: no torch import, no execution.
It runs inside the sandboxed child, so a parser bomb (deep nesting, huge literals) only ever hits
that one disposable process.
"""

from __future__ import annotations

import ast
import builtins
import re
import string
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAX_NODES = 5000
MAX_DEPTH = 50

ALLOWED_IMPORTS = frozenset(
    {
        "torch",
        "torch.nn",
        "torch.nn.functional",
        "torch.nn.init",
        "torch.autograd",
        "torch.autograd.graph",
        "torch.autograd.functional",
        "torch.optim",
        "torch.linalg",
        "torch.fft",
        "torch.special",
        "torch.distributions",
        "torch.func",
        "torch.random",
        "torch.types",
        "math",
        "random",
        "itertools",
        "collections",
    }
)

# Builtins that reach outside the snippet, evaluate strings, or walk objects by computed name.
BLOCKED_BUILTINS = frozenset(
    {
        "open",
        "eval",
        "exec",
        "compile",
        "input",
        "breakpoint",
        "help",
        "globals",
        "locals",
        "vars",
        "getattr",
        "setattr",
        "delattr",
        "__import__",
        "memoryview",
        "exit",
        "quit",
        "copyright",
        "credits",
        "license",
    }
)

# Attributes that lead to the OS, to (de)serialization or code generation, or to global state.
BLOCKED_ATTRIBUTES = frozenset(
    {
        "os",
        "sys",
        "ctypes",
        "builtins",
        "importlib",
        "glob",
        "inspect",
        "platform",
        "threading",
        "subprocess",
        "signal",
        "shutil",
        "tempfile",
        "pickle",
        "io",
        "mmap",
        "socket",
        "hub",
        "load",
        "save",
        "from_file",
        "serialization",
        "compile",
        "compiler",
        "jit",
        "ops",
        "classes",
        "library",
        "package",
        "export",
        "fx",
        "onnx",
        "multiprocessing",
        "distributed",
        "utils",
        "cpp_extension",
        "collect_env",
        "backends",
        "cuda",
        "mps",
        "xpu",
        "mtia",
        "accelerator",
        "profiler",
        "monitor",
        "set_num_threads",
        "set_num_interop_threads",
        "set_default_device",
        "numpy",
        "format_map",
        "set_default_tensor_type",
    }
)
BLOCKED_ATTRIBUTE_PREFIXES = ("f_", "tb_", "gi_", "cr_", "ag_", "co_")

# Underscore attributes that teaching needs (the explorer shows them).
ALLOWED_UNDERSCORE_ATTRIBUTES = frozenset({"_version", "_base", "_is_view", "__init__", "__version__"})
ALLOWED_UNDERSCORE_PREFIXES = ("_saved_",)
ALLOWED_UNDERSCORE_NAMES = frozenset({"_", "__name__"})
# Methods a snippet's own class may define.
ALLOWED_DUNDER_METHODS = frozenset(
    {
        "__init__",
        "__call__",
        "__len__",
        "__getitem__",
        "__setitem__",
        "__iter__",
        "__next__",
        "__repr__",
        "__str__",
        "__eq__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__hash__",
        "__contains__",
        "__add__",
        "__sub__",
        "__mul__",
        "__truediv__",
        "__matmul__",
        "__neg__",
        "__enter__",
        "__exit__",
    }
)

PLAYGROUND = "is not available in the playground"


@dataclass(frozen=True)
class Rejection:
    line: int | None
    rule: str
    message: str


class _Rejected(Exception):
    def __init__(self, node: ast.AST | None, rule: str, message: str) -> None:
        super().__init__(message)
        self.rejection = Rejection(getattr(node, "lineno", None), rule, message)


def check(source: str) -> Rejection | None:
    """``None`` when the snippet may run; else the first problem found, in source order."""
    try:
        tree = ast.parse(source, "<snippet>", "exec")
    except (SyntaxError, ValueError):
        return None  # the engine reports syntax errors (and null bytes) with Python's own message
    except (RecursionError, MemoryError):
        return Rejection(None, "size", "The snippet is nested too deeply (or is too large) to read.")
    try:
        _check_shape(tree)
        _Checker().visit(tree)
    except _Rejected as rejected:
        return rejected.rejection
    except RecursionError:
        return Rejection(None, "size", "The snippet is nested too deeply to read.")
    return None


def _check_shape(tree: ast.AST) -> None:
    count = 0
    stack: list[tuple[ast.AST, int, ast.AST]] = [(tree, 0, tree)]  # (node, depth, nearest node with a line)
    while stack:
        node, depth, located = stack.pop()
        located = node if hasattr(node, "lineno") else located
        count += 1
        if count > MAX_NODES:
            raise _Rejected(
                None,
                "size",
                f"The snippet is too long for the playground (more than {MAX_NODES:,} "
                "pieces of syntax). Try a shorter example.",
            )
        if depth > MAX_DEPTH:
            raise _Rejected(
                located, "size", f"The snippet is nested too deeply (more than {MAX_DEPTH} levels)."
            )
        stack.extend((child, depth + 1, located) for child in ast.iter_child_nodes(node))


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _format_fields(text: str) -> Iterator[str]:
    """Field names of a ``str.format`` template, nested ones (inside format specs) included."""
    for _literal, name, spec, _conversion in string.Formatter().parse(text):
        if name is not None:
            yield name
        if spec:
            yield from _format_fields(spec)


class _Checker(ast.NodeVisitor):
    def __init__(self) -> None:
        self._class_depth = 0
        self._imported_modules: set[str] = set()

    # -- names ---------------------------------------------------------------------------------
    def _name(self, node: ast.AST, name: str) -> None:
        if name in BLOCKED_BUILTINS:
            raise _Rejected(node, "builtin", f"`{name}` {PLAYGROUND}.")
        if name.startswith("_") and name not in ALLOWED_UNDERSCORE_NAMES:
            raise _Rejected(
                node,
                "underscore",
                f"Names starting with `_` (here `{name}`) are not available in the playground.",
            )

    def visit_Name(self, node: ast.Name) -> None:  # noqa: N802 - ast.NodeVisitor's naming
        self._name(node, node.id)

    def visit_arg(self, node: ast.arg) -> None:
        self._name(node, node.arg)
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is not None:
            self._name(node, node.arg)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:  # noqa: N802
        for name in node.names:
            self._name(node, name)

    visit_Nonlocal = visit_Global  # noqa: N815

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:  # noqa: N802
        if node.name:
            self._name(node, node.name)
        self.generic_visit(node)

    # -- attributes ----------------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:  # noqa: N802
        attr = node.attr
        shown = _dotted(node) or f".{attr}"
        if attr.startswith("_"):
            if not (attr in ALLOWED_UNDERSCORE_ATTRIBUTES or attr.startswith(ALLOWED_UNDERSCORE_PREFIXES)):
                raise _Rejected(
                    node,
                    "underscore",
                    f"Attributes starting with `_` (here `{shown}`) are not available in the playground.",
                )
        elif attr in BLOCKED_ATTRIBUTES or attr.startswith(BLOCKED_ATTRIBUTE_PREFIXES):
            raise _Rejected(node, "attribute", f"`{shown}` {PLAYGROUND}.")
        elif attr == "format":
            self._check_format(node)
        if isinstance(node.ctx, ast.Store | ast.Del):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in {
                "torch",
                "nn",
                "F",
                "math",
                *self._imported_modules,
            }:
                raise _Rejected(
                    node, "monkeypatch", f"Changing `{shown}` {PLAYGROUND}: it belongs to a module."
                )
        self.generic_visit(node)

    def _check_format(self, node: ast.Attribute) -> None:
        # "{0.__class__}".format(x) walks attributes by name; allow only literal templates without that.
        template = node.value
        if not (isinstance(template, ast.Constant) and isinstance(template.value, str)):
            raise _Rejected(
                node,
                "format",
                "`.format` is only available on a string written in the snippet; an f-string works too.",
            )
        try:
            fields = list(_format_fields(template.value))
        except ValueError:
            return  # str.format will raise the same error when it runs
        for field in fields:
            if any(part.startswith("_") for part in re.split(r"[.\[\]]", field)):
                raise _Rejected(
                    node,
                    "underscore",
                    "Format fields that reach attributes starting with `_` are "
                    "not available in the playground.",
                )

    # -- imports -------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:  # noqa: N802
        for alias in node.names:
            self._module(node, alias.name)
            if alias.asname:
                self._name(node, alias.asname)
            self._imported_modules.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:  # noqa: N802
        if node.level:
            raise _Rejected(node, "import", f"Relative imports {PLAYGROUND}.")
        module = node.module or ""
        self._module(node, module)
        for alias in node.names:
            if alias.name == "*":
                raise _Rejected(
                    node, "import", f"`from {module} import *` {PLAYGROUND}; import the names you need."
                )
            self._name(node, alias.name)
            if alias.name in BLOCKED_ATTRIBUTES:
                raise _Rejected(node, "attribute", f"`{module}.{alias.name}` {PLAYGROUND}.")
            full = f"{module}.{alias.name}"
            if alias.asname:
                self._name(node, alias.asname)
            if full in ALLOWED_IMPORTS:
                self._imported_modules.add(alias.asname or alias.name)

    def _module(self, node: ast.AST, module: str) -> None:
        if module not in ALLOWED_IMPORTS:
            raise _Rejected(
                node,
                "import",
                f"Importing `{module}` {PLAYGROUND}. You can import torch "
                "(torch.nn, torch.nn.functional, torch.autograd, torch.optim, ...) "
                "and math.",
            )

    # -- definitions ---------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:  # noqa: N802
        if not (self._class_depth and node.name in ALLOWED_DUNDER_METHODS):
            self._name(node, node.name)
        saved, self._class_depth = self._class_depth, 0  # a function nested in a method is not a method
        self.generic_visit(node)
        self._class_depth = saved

    def visit_ClassDef(self, node: ast.ClassDef) -> None:  # noqa: N802
        self._name(node, node.name)
        self._class_depth += 1
        self.generic_visit(node)
        self._class_depth -= 1

    def visit_Lambda(self, node: ast.Lambda) -> None:  # noqa: N802
        saved, self._class_depth = self._class_depth, 0
        self.generic_visit(node)
        self._class_depth = saved

    def visit_Call(self, node: ast.Call) -> None:  # noqa: N802
        if isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) > 1:
            raise _Rejected(
                node,
                "builtin",
                f"Creating classes with `type(name, bases, dict)` {PLAYGROUND}; use a class statement.",
            )
        self.generic_visit(node)

    # -- statements the playground does not run ------------------------------------------------
    def _unsupported(self, node: ast.AST, what: str) -> None:
        raise _Rejected(node, "statement", f"{what} {PLAYGROUND}.")

    def visit_AsyncFunctionDef(self, node: ast.AST) -> None:  # noqa: N802
        self._unsupported(node, "`async` code")

    visit_AsyncFor = visit_AsyncWith = visit_Await = visit_AsyncFunctionDef  # noqa: N815

    def visit_Match(self, node: ast.AST) -> None:  # noqa: N802 - class patterns read attributes by name
        self._unsupported(node, "`match` statements")


# -- the builtins a gated snippet sees (cosmetic third layer: the gate already refused the names) ----


def _guarded_import(
    name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
) -> Any:  # noqa: A002
    # torch's C++ code imports its own submodules (torch.storage on the first torch.tensor call)
    # through the running frame's builtins, i.e. this function: hand back what is already loaded.
    if not level and (name == "torch" or name.startswith("torch.")) and name in sys.modules:
        return builtins.__import__(name, globals, locals, fromlist, level)
    if level or name not in ALLOWED_IMPORTS:
        raise ImportError(f"Importing `{name}` {PLAYGROUND}.")
    return builtins.__import__(name, globals, locals, fromlist, level)


def safe_builtins() -> dict[str, Any]:
    namespace = {k: v for k, v in vars(builtins).items() if k not in BLOCKED_BUILTINS}
    namespace["__import__"] = _guarded_import
    return namespace
