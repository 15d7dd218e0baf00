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
import dataclasses
import re
import string
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from app.policy_names import (
    ALLOWED_DUNDER_METHODS,
    ALLOWED_IMPORTS,
    ALLOWED_UNDERSCORE_ATTRIBUTES,
    ALLOWED_UNDERSCORE_NAMES,
    ALLOWED_UNDERSCORE_PREFIXES,
    BLOCKED_ATTRIBUTE_PREFIXES,
    BLOCKED_ATTRIBUTES,
    BLOCKED_BUILTINS,
    CHECKED_AT_RUN_TIME,
    CHECKED_CALLS,
    CLASS_NAME_ATTRIBUTES,
    IMPORT_REWRITES,
    MAX_DEPTH,
    MAX_NODES,
    MODULE_MEMBERS,
    NAMED_ATTRIBUTE_BUILTINS,
    ONLY_NAMES,
    PRELUDE_MODULES,
    SETTABLE_FLAGS,
    WALKABLE_MODULES,
)
from app.run_errors import TEMPLATES, Param, english

# What to write instead, for the refusals learners meet most: "policy.instead.<name>" in
# app/run_errors.py (each a whole sentence, so that it translates as one).
REWRITES = frozenset(code.removeprefix("policy.instead.") for code in TEMPLATES
                     if code.startswith("policy.instead."))



def _refused(what: str, name: str) -> tuple[str, dict[str, Param]]:
    return (f"policy.instead.{name}" if name in REWRITES else "policy.unavailable"), {"what": what}


@dataclass(frozen=True)
class Rejection:
    """The first problem found: its line, the rule, the message (English) and its code and params
    (``app.run_errors``: the page translates it from these)."""

    line: int | None
    rule: str
    code: str
    params: dict[str, Param] = dataclasses.field(default_factory=dict)

    @property
    def message(self) -> str:
        return english(self.code, self.params)


class _Rejected(Exception):
    def __init__(self, node: ast.AST | None, rule: str, code: str, params: dict[str, Param] | None = None,
                 ) -> None:
        self.rejection = Rejection(getattr(node, "lineno", None), rule, code, params or {})
        super().__init__(self.rejection.message)


def check(source: str) -> Rejection | None:
    """``None`` when the snippet may run; else the first problem found, in source order."""
    try:
        tree = ast.parse(source, "<snippet>", "exec")
    except (SyntaxError, ValueError):
        return None  # the engine reports syntax errors (and null bytes) with Python's own message
    except (RecursionError, MemoryError):
        return Rejection(None, "size", "policy.too_deep_or_large")
    try:
        _check_shape(tree)
        _Checker(tree).visit(tree)
    except _Rejected as rejected:
        return rejected.rejection
    except RecursionError:
        return Rejection(None, "size", "policy.too_deep")
    return None


def _check_shape(tree: ast.AST) -> None:
    count = 0
    stack: list[tuple[ast.AST, int, ast.AST]] = [(tree, 0, tree)]  # (node, depth, nearest node with a line)
    while stack:
        node, depth, located = stack.pop()
        located = node if hasattr(node, "lineno") else located
        count += 1
        if count > MAX_NODES:
            raise _Rejected(None, "size", "policy.too_long", {"nodes": MAX_NODES})
        if depth > MAX_DEPTH:
            raise _Rejected(located, "size", "policy.too_deep_levels", {"depth": MAX_DEPTH})
        stack.extend((child, depth + 1, located) for child in ast.iter_child_nodes(node))


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name the snippet binds somewhere: assigned, a parameter, defined, imported, caught."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound


_MISSING = object()


def _module_member(module: str, attr: str) -> Any:
    """What ``module.attr`` holds, read from the modules already loaded (the fork server preloads
    every walkable one) through the module's ``__dict__``: nothing runs, no lazy import is triggered.
    ``_MISSING`` when that cannot be known."""
    loaded = sys.modules.get(module)
    value = vars(loaded).get(attr, _MISSING) if loaded is not None else _MISSING
    if value is _MISSING and f"{module}.{attr}" in sys.modules:
        return sys.modules[f"{module}.{attr}"]
    return value


def _module_attribute(module: str, attr: str, value: Any) -> str | None:
    """The name of the module ``module.attr`` is, or None when it is not a module (or unknown);
    ``value``: what ``_module_member`` says it holds."""
    if isinstance(value, types.ModuleType):
        return value.__name__
    if value is _MISSING and module not in sys.modules and f"{module}.{attr}" in WALKABLE_MODULES:
        return f"{module}.{attr}"  # torch not loaded here (tests of the gate alone)
    return None


def _is_metaclass(value: Any) -> bool:
    """A class whose instances are classes: called with (name, bases, namespace) it makes a class
    with whatever methods the namespace holds (``typing.ABCMeta``, ``autograd.function.FunctionMeta``)."""
    return isinstance(value, type) and issubclass(value, type)


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _format_fields(text: str) -> Iterator[str]:
    """Field names of a ``str.format`` template, nested ones (inside format specs) included."""
    for _literal, name, spec, _conversion in string.Formatter().parse(text):
        if name is not None:
            yield name
        if spec:
            yield from _format_fields(spec)


class _Checker(ast.NodeVisitor):
    def __init__(self, tree: ast.AST) -> None:
        self._parents = {id(c): parent for parent in ast.walk(tree) for c in ast.iter_child_nodes(parent)}
        self._bound = _bound_names(tree)
        self._class_depth = 0
        self._imported_modules: set[str] = set()
        self._modules: dict[str, str] = dict(PRELUDE_MODULES)  # name -> the module it stands for
        self._walk_roots: set[int] = set()  # Name nodes that start an attribute path
        self._named_calls: set[int] = set()  # getattr & co. called with a literal name
        self._alias_targets: set[int] = set()  # `F = torch.nn.functional`: the value node

    def visit_Module(self, node: ast.Module) -> None:  # noqa: N802
        # A module path assigned to a plain name at the top level is an alias (`F = torch.nn.functional`).
        for statement in node.body:
            if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                    and isinstance(statement.targets[0], ast.Name)):
                self._alias_targets.add(id(statement.value))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:  # noqa: N802
        self.generic_visit(node)
        if self._aliasing(node.value):
            name = node.targets[0].id  # type: ignore[attr-defined]
            module = self._walk(node.value)
            if module is not None:
                self._modules[name] = module  # walks through the alias are checked like the original
            else:
                self._modules.pop(name, None)

    def _aliasing(self, node: ast.AST) -> bool:
        return id(node) in self._alias_targets

    # -- walks through modules -----------------------------------------------------------------
    def _walk(self, node: ast.AST) -> str | None:
        """The module an attribute path (``torch.nn.functional``, ``getattr(torch, "nn")``) stands for,
        refusing a step into a module that is not walkable, or onto a metaclass; None once the path
        leaves modules."""
        if isinstance(node, ast.Name):
            if node.id in self._modules:
                self._walk_roots.add(id(node))
                return self._modules[node.id]
            return None
        if isinstance(node, ast.Attribute):
            base, attr = node.value, node.attr
        elif self._is_named_call(node, "getattr", "hasattr"):
            base, attr = node.args[0], node.args[1].value  # type: ignore[attr-defined]
        else:
            return None
        module = self._walk(base)
        if module is None:
            return None
        self._attribute(node, attr, base)  # a blocked name says so first (`torch.os`)
        self._only_names(node, module, attr)
        shown = _dotted(node) or f"{module}.{attr}"
        target = self._member_module(node, module, attr, shown)
        if target is None:
            return None
        if target not in WALKABLE_MODULES:
            raise _Rejected(node, "module", "policy.module_attribute",
                            {"what": shown, "target": target, "module": module})
        return target

    def _member_module(self, node: ast.AST, module: str, attr: str, shown: str) -> str | None:
        """The module ``module.attr`` is (None: not a module, or unknown), refusing a metaclass there:
        one lookup of what it holds for both, whether it is walked to or imported."""
        value = _module_member(module, attr)
        if _is_metaclass(value):
            raise _Rejected(node, "class", "policy.metaclass", {"what": shown})
        return _module_attribute(module, attr, value)

    def _is_named_call(self, node: ast.AST, *names: str) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str) and not node.keywords)

    # -- names ---------------------------------------------------------------------------------
    def _name(self, node: ast.AST, name: str, *, builtin: bool = True) -> None:
        """A name the snippet writes. ``builtin``: it may stand for a builtin here (a keyword
        argument's name never does)."""
        if builtin and name in BLOCKED_BUILTINS and name not in self._bound:
            raise _Rejected(node, "builtin", *_refused(name, name))
        if (builtin and name in NAMED_ATTRIBUTE_BUILTINS and name not in CHECKED_AT_RUN_TIME
                and id(node) not in self._named_calls):
            raise _Rejected(node, "builtin", "policy.named_call", {"name": name})
        if name == "__slots__" and self._class_depth and isinstance(getattr(node, "ctx", None), ast.Store):
            return
        # (`_label`, `_text`: the text classification tutorial's loop names; a dunder name is Python's
        # own, `__builtins__`, `__class__`, and a double-underscore one is mangled into a class's)
        if name.startswith("__") and name not in ALLOWED_UNDERSCORE_NAMES:
            raise _Rejected(node, "underscore", "policy.underscore_name",
                            {"name": name, "suggested": name.strip("_") or "value"})

    def visit_Name(self, node: ast.Name) -> None:  # noqa: N802 - ast.NodeVisitor's naming
        self._name(node, node.id)
        if (isinstance(node.ctx, ast.Load) and node.id in self._modules and id(node) not in self._walk_roots
                and not self._aliasing(node)):
            raise _Rejected(node, "module", "policy.module_passed", {"module": node.id})

    def visit_arg(self, node: ast.arg) -> None:
        self._name(node, node.arg)
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is not None:
            self._name(node, node.arg, builtin=False)  # F.cross_entropy(input=..., target=...)
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
        self._attribute(node, node.attr, node.value)
        module = self._walk(node)
        if module is not None and not self._inside_walk(node) and not self._aliasing(node):
            raise _Rejected(node, "module", "policy.module_stored", {"module": module})
        if isinstance(node.ctx, ast.Store | ast.Del):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and (root.id in self._imported_modules or root.id in self._modules):
                shown = _dotted(node) or f".{node.attr}"
                if not (isinstance(node.ctx, ast.Store) and self._flag(shown) in SETTABLE_FLAGS):
                    raise _Rejected(node, "monkeypatch", "policy.change_module_attribute", {"what": shown})
        self.generic_visit(node)

    def _flag(self, dotted: str) -> str:
        """The flag a store names, from its module: ``cudnn.benchmark`` after ``import
        torch.backends.cudnn as cudnn`` is ``torch.backends.cudnn.benchmark``."""
        root, _, rest = dotted.partition(".")
        return f"{self._modules.get(root, root)}.{rest}"

    def _inside_walk(self, node: ast.AST) -> bool:
        parent = self._parents.get(id(node))
        return (isinstance(parent, ast.Attribute) and parent.value is node) or (
            self._is_named_call(parent, "getattr", "hasattr") and parent.args[0] is node  # type: ignore[union-attr]
        )

    def _attribute(self, node: ast.AST, attr: str, value: ast.AST) -> None:
        """The checks for ``value.attr`` (written as an attribute or as ``getattr(value, "attr")``)."""
        shown = _dotted(node) or f"{_dotted(value) or ''}.{attr}"
        own = isinstance(value, ast.Name) and value.id in ("self", "cls") and not attr.startswith("__")
        if attr.startswith("_") and not own:
            if attr == "__class__" and self._class_name(node):
                return
            if not (attr in ALLOWED_UNDERSCORE_ATTRIBUTES or attr.startswith(ALLOWED_UNDERSCORE_PREFIXES)):
                code = "policy.class_attribute" if attr == "__class__" else "policy.underscore_attribute"
                raise _Rejected(node, "underscore", code, {"name": shown})
        elif attr in BLOCKED_ATTRIBUTES and attr in MODULE_MEMBERS.get(self._module_named(value) or "", ()):
            self._module_member_used(node, f"{self._module_named(value)}.{attr}", shown)
        elif attr in BLOCKED_ATTRIBUTES or attr.startswith(BLOCKED_ATTRIBUTE_PREFIXES):
            raise _Rejected(node, "attribute", *_refused(shown, attr))
        elif attr == "format":
            self._check_format(node, value)

    def _module_named(self, node: ast.AST) -> str | None:
        """The module an attribute path written in the snippet names (``torch``, ``F`` after ``import
        torch.nn.functional as F``), without walking it; None when it names no module the snippet has."""
        dotted = _dotted(node)
        root, _, rest = (dotted or "").partition(".")
        if root not in self._modules:
            return None
        return f"{self._modules[root]}.{rest}" if rest else self._modules[root]

    def _module_member_used(self, node: ast.AST, member: str, shown: str) -> None:
        """A blocked name that this module's member may still be (``MODULE_MEMBERS``): ``re.compile``
        as it is; ``torch.save`` / ``torch.load`` only called right there, with their arguments checked."""
        if member not in CHECKED_CALLS:
            return
        call = self._parents.get(id(node))
        if not (isinstance(node, ast.Attribute) and isinstance(call, ast.Call) and call.func is node):
            raise _Rejected(node, "attribute", "policy.serialization_called", {"what": shown})
        self._serialization(call, member, shown)

    def _serialization(self, call: ast.Call, member: str, shown: str) -> None:
        """``torch.save(obj, f)`` / ``torch.load(f)``: ``f`` a file object (there are no files here), and
        no unpickling of arbitrary classes (a pickle names them by strings: an attribute walk)."""
        file_index = 1 if member == "torch.save" else 0
        keywords = {k.arg: k.value for k in call.keywords}
        # (the third positional argument of both is pickle_module)
        if (None in keywords or "pickle_module" in keywords or len(call.args) > 2
                or any(isinstance(a, ast.Starred) for a in call.args)):
            raise _Rejected(call, "attribute", "policy.serialization_pickle", {"what": shown})
        weights_only = keywords.get("weights_only")
        if weights_only is not None and not (isinstance(weights_only, ast.Constant)
                                             and weights_only.value is True):
            raise _Rejected(call, "attribute", "policy.serialization_pickle", {"what": shown})
        target = call.args[file_index] if len(call.args) > file_index else keywords.get("f")
        if isinstance(target, ast.JoinedStr) or (isinstance(target, ast.Constant) and isinstance(
                target.value, str | bytes)):
            raise _Rejected(call, "attribute", "policy.serialization_file", {"what": shown})

    def _class_name(self, node: ast.AST) -> bool:
        """``m.__class__.__name__``: the class only read on the way to its name (a string)."""
        parent = self._parents.get(id(node))
        return (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                and isinstance(parent, ast.Attribute) and parent.value is node
                and parent.attr in CLASS_NAME_ATTRIBUTES and isinstance(parent.ctx, ast.Load))

    def _check_format(self, node: ast.AST, template: ast.AST) -> None:
        # "{0.__class__}".format(x) walks attributes by name; allow only literal templates whose fields
        # name no attribute the snippet could not write itself.
        if not (isinstance(template, ast.Constant) and isinstance(template.value, str)):
            raise _Rejected(node, "format", "policy.format")
        try:
            fields = list(_format_fields(template.value))
        except ValueError:
            return  # str.format will raise the same error when it runs
        for field in fields:
            for part in re.split(r"[.\[\]]", field):
                if part.startswith(("_", *BLOCKED_ATTRIBUTE_PREFIXES)) or part in BLOCKED_ATTRIBUTES:
                    raise _Rejected(node, "underscore", "policy.underscore_format")

    # -- imports -------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:  # noqa: N802
        for alias in node.names:
            self._module(node, alias.name)
            if alias.asname:
                self._name(node, alias.asname)
                self._modules[alias.asname] = alias.name
            else:
                self._modules[alias.name.split(".")[0]] = alias.name.split(".")[0]
            self._imported_modules.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:  # noqa: N802
        if node.level:
            raise _Rejected(node, "import", "policy.relative_import")
        module = node.module or ""
        self._module(node, module)
        for alias in node.names:
            if alias.name == "*":
                raise _Rejected(node, "import", "policy.star_import", {"module": module})
            full = f"{module}.{alias.name}"
            if alias.name.startswith("_"):  # a module's private member, as `module._name` is refused
                raise _Rejected(node, "underscore", "policy.underscore_attribute", {"name": full})
            self._name(node, alias.name)
            self._only_names(node, module, alias.name)
            if alias.name in BLOCKED_ATTRIBUTES and not (
                    alias.name in MODULE_MEMBERS.get(module, ()) and full not in CHECKED_CALLS):
                raise _Rejected(node, "attribute", *_refused(full, alias.name))
            if alias.asname:
                self._name(node, alias.asname)
            target = self._member_module(node, module, alias.name, full)
            if target is not None and target not in WALKABLE_MODULES:
                raise _Rejected(node, "module", "policy.module_import", {"what": full, "target": target})
            if full in ALLOWED_IMPORTS or target is not None:
                self._imported_modules.add(alias.asname or alias.name)
                self._modules[alias.asname or alias.name] = target or full

    def _module(self, node: ast.AST, module: str) -> None:
        if module not in ALLOWED_IMPORTS:
            parts = module.split(".")
            if parts[0] in IMPORT_REWRITES:
                raise _Rejected(node, "import", f"policy.import_instead.{parts[0]}", {"module": module})
            rewrite = next((part for part in parts if part in REWRITES), None)  # torch.profiler, torch.jit
            if rewrite is not None:
                raise _Rejected(node, "import", *_refused(module, rewrite))
            raise _Rejected(node, "import", "policy.import", {"module": module})

    def _only_names(self, node: ast.AST, module: str, name: str) -> None:
        """``gc.collect`` but not ``gc.get_objects`` (``ONLY_NAMES``)."""
        allowed = ONLY_NAMES.get(module)
        if allowed is not None and name not in allowed:
            raise _Rejected(node, "attribute", f"policy.only_names.{module}", {"what": f"{module}.{name}"})

    # -- definitions ---------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:  # noqa: N802
        if self._class_depth and _is_dunder(node.name) and node.name not in ALLOWED_DUNDER_METHODS:
            # Python calls these behind the code's back (reading any attribute, making classes)
            raise _Rejected(node, "underscore", "policy.dunder_method", {"name": node.name})
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
        if self._is_named_call(node, *NAMED_ATTRIBUTE_BUILTINS):
            self._named_calls.add(id(node.func))
            self._attribute(node, node.args[1].value, node.args[0])  # type: ignore[attr-defined]
            if node.func.id in ("setattr", "delattr"):  # type: ignore[attr-defined]
                target = node.args[0]
                if isinstance(target, ast.Name) and target.id in self._modules:
                    raise _Rejected(node, "monkeypatch", "policy.change_module", {"what": target.id})
            if node.func.id in ("getattr", "hasattr"):  # type: ignore[attr-defined]
                module = self._walk(node)
                # (hasattr answers a bool: `if hasattr(torch.backends, "mps")` stores no module)
                if (module is not None and node.func.id == "getattr"  # type: ignore[attr-defined]
                        and not self._inside_walk(node) and not self._aliasing(node)):
                    raise _Rejected(node, "module", "policy.module_stored", {"module": module})
        if self._calls_type(node) and (len(node.args) != 1 or node.keywords):
            raise _Rejected(node, "class", "policy.type_class")
        if self._calls_type(node.func):  # type(nn.Module)("A", (), {...}): a metaclass, called
            raise _Rejected(node, "class", "policy.type_of_class")
        self.generic_visit(node)

    def _calls_type(self, node: ast.AST) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type"
                and "type" not in self._bound)

    # -- statements the playground does not run ------------------------------------------------
    def _unsupported(self, node: ast.AST, code: str) -> None:
        raise _Rejected(node, "statement", code)

    def visit_AsyncFunctionDef(self, node: ast.AST) -> None:  # noqa: N802
        self._unsupported(node, "policy.async")

    visit_AsyncFor = visit_AsyncWith = visit_Await = visit_AsyncFunctionDef  # noqa: N815

    def visit_Match(self, node: ast.AST) -> None:  # noqa: N802 - class patterns read attributes by name
        self._unsupported(node, "policy.match")
