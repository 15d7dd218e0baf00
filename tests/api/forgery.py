"""Forged traces for the consistency tests: what the server does with an answer (every pure function a
route calls on it), and seeded mutations of golden traces (plain data, as a hostile child writes it)."""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from app.diagnostics import analyze, analyze_v1
from app.render import build_explorer
from app.render.svg import render_svg
from app.trace.delta import expand, expanded_size
from app.web.embed import embed_run_context
from app.web.pages import render, run_context

V1_LIMIT = 8 << 20
KINDS = ("tensors", "storages", "nodes")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def no_swallowed_errors() -> Iterator[None]:
    """Diagnostics skip (and log) a rule that raises: here such a log is a failure too."""
    handler = _Collect()
    logger = logging.getLogger("app")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    failures = [r.getMessage() + (f" ({r.exc_info[1]!r})" if r.exc_info else "") for r in handler.records]
    assert not failures, failures


def through_the_routes(trace: Any, code: str, svg_steps: int = 2) -> None:
    """Everything ``/api/run`` (both formats), ``/run``, ``/embed/run`` and ``/render.svg`` compute
    from an accepted answer: diagnostics and memory accounting, v1, the graph and memory views and
    their templates, the SVG of some steps in every view. Raises whatever any of them raises."""
    with no_swallowed_errors():
        analyze(trace, code).model_dump_json()
        if expanded_size(trace) <= V1_LIMIT:
            analyze_v1(trace, code).model_dump_json()
            expand(trace)
        render("_run.html", **run_context(trace, code, None, 10_000))
        render("_embed_run.html", **embed_run_context(trace, code, 0, "both", 10_000))
        view = build_explorer(trace, code, None, 10_000)
        count = max(len(trace.steps), 1)
        for step in sorted({0, count - 1, count // 2})[:svg_steps + 1]:
            for which in ("both", "memory", "graph"):
                render_svg(view, step, which, "light")


# --- mutations of plain trace data -----------------------------------------------------------------

Mutation = Callable[[dict, random.Random], str | None]  # mutates in place; says what it did (None: no-op)


def _steps_with(data: dict, kind: str) -> list[dict]:
    return [s for s in data["steps"] if s.get(kind)]


def _all_ids(data: dict, kind: str) -> list[str]:
    return sorted({i for s in data["steps"] for i in s.get(kind, {})})


def _pick_fact(data: dict, rng: random.Random, kind: str) -> tuple[dict, str, dict] | None:
    steps = _steps_with(data, kind)
    if not steps:
        return None
    step = rng.choice(steps)
    ident = rng.choice(sorted(step[kind]))
    return step, ident, step[kind][ident]


def _some_id(data: dict, rng: random.Random, kind: str) -> str:
    """An id of ``kind`` from anywhere in the trace (alive at some other step), or a fresh one."""
    known = _all_ids(data, kind)
    if known and rng.random() < 0.8:
        return rng.choice(known)
    return kind[0] + str(rng.randrange(900, 999))


def delete_fact(data: dict, rng: random.Random) -> str | None:
    kind = rng.choice(KINDS)
    picked = _pick_fact(data, rng, kind)
    if picked is None:
        return None
    step, ident, _ = picked
    del step[kind][ident]
    return f"deleted {ident}"


def duplicate_fact(data: dict, rng: random.Random) -> str | None:
    """A fact copied under another id, or into another step."""
    kind = rng.choice(KINDS)
    picked = _pick_fact(data, rng, kind)
    if picked is None:
        return None
    _, ident, fact = picked
    target = rng.choice(data["steps"])
    other = _some_id(data, rng, kind) if rng.random() < 0.5 else ident
    target.setdefault(kind, {})[other] = copy.deepcopy(fact)
    return f"copied {ident} as {other}"


def alter_reference(data: dict, rng: random.Random) -> str | None:
    """A tensor's storage / grad_fn / grad / base, a node's next / variable / saved, or a name
    pointed elsewhere (another id of the run, or one that never exists)."""
    choice = rng.choice(["tensor", "node", "variable"])
    if choice == "variable":
        picked = _pick_fact(data, rng, "variables")
        if picked is None:
            return None
        step, name, _ = picked
        step["variables"][name] = _some_id(data, rng, "tensors")
        return f"name {name} repointed"
    if choice == "tensor":
        picked = _pick_fact(data, rng, "tensors")
        if picked is None:
            return None
        _, tid, fact = picked
        field = rng.choice(["storage", "grad_fn", "grad", "base"])
        kind = {"storage": "storages", "grad_fn": "nodes"}.get(field, "tensors")
        fact[field] = _some_id(data, rng, kind)
        return f"{tid}.{field} repointed"
    picked = _pick_fact(data, rng, "nodes")
    if picked is None:
        return None
    _, nid, fact = picked
    field = rng.choice(["next", "variable", "saved"])
    if field == "next":
        grow = rng.random() < 0.5 or not fact["next"]
        fact["next"] = [*fact["next"], _some_id(data, rng, "nodes")] if grow \
            else [_some_id(data, rng, "nodes") for _ in fact["next"]]
    elif field == "variable":
        fact["variable"] = _some_id(data, rng, "tensors")
    else:
        fact["saved"] = {**fact.get("saved", {}), "self": _some_id(data, rng, "tensors")}
    return f"{nid}.{field} repointed"


def alter_layout(data: dict, rng: random.Random) -> str | None:
    picked = _pick_fact(data, rng, "tensors")
    if picked is None:
        return None
    _, tid, fact = picked
    field = rng.choice(["shape", "stride", "offset", "rank", "huge"])
    if field == "shape" and fact["shape"]:
        fact["shape"][rng.randrange(len(fact["shape"]))] += rng.choice([-1, 1, 7, -100])
    elif field == "stride" and fact["stride"]:
        fact["stride"][rng.randrange(len(fact["stride"]))] = rng.choice([0, 3, 1000, -1])
    elif field == "offset":
        fact["storage_offset"] = rng.choice([1, 5, 10**9, -3])
    elif field == "rank":
        where = rng.choice(["shape", "stride"])
        fact[where] = [*fact[where], 2] if rng.random() < 0.5 or not fact[where] else fact[where][:-1]
    else:
        huge = rng.choice([2**40, 2**62, 2**63 + 1])
        fact[rng.choice(["shape", "stride"])] = [huge] * max(len(fact["shape"]), 1)
    return f"{tid}.{field} altered"


def alter_values(data: dict, rng: random.Random) -> str | None:
    if rng.random() < 0.3:
        picked = _pick_fact(data, rng, "storages")
        if picked is None:
            return None
        _, sid, fact = picked
        change = rng.choice(["values", "nbytes", "element_size"])
        if change == "values":
            fact["values"] = [*(fact.get("values") or []), 1.0][: 64]
        elif change == "nbytes":
            fact["nbytes"] = rng.choice([0, 1, fact["nbytes"] * 4, -8, 2**70])
        else:
            fact["element_size"] = rng.choice([0, 3, 1000])
        return f"{sid}.{change} altered"
    picked = _pick_fact(data, rng, "tensors")
    if picked is None:
        return None
    _, tid, fact = picked
    values = fact.get("values")
    change = rng.choice(["flatten", "nest", "drop", "scalar", "summary"])
    if change == "flatten" and isinstance(values, list):
        fact["values"] = [v for row in values for v in (row if isinstance(row, list) else [row])]
    elif change == "nest":
        fact["values"] = [values]
    elif change == "drop" and isinstance(values, list) and values:
        fact["values"] = values[:-1]
    elif change == "scalar":
        fact["values"] = rng.choice([1.5, "NaN", [1.0, [2.0]], [[]]])
    else:
        fact["summary"] = {"numel": rng.choice([0, 5, 10**6])}
    return f"{tid}.values {change}"


def alter_drops(data: dict, rng: random.Random) -> str | None:
    step = rng.choice(data["steps"])
    kind = rng.choice(("variables", *KINDS))
    dropped = step.setdefault("dropped", {})
    if dropped.get(kind) and rng.random() < 0.5:
        gone = dropped[kind].pop(rng.randrange(len(dropped[kind])))
        return f"undropped {gone}"
    ident = _some_id(data, rng, kind) if kind != "variables" else rng.choice(["x", "nope", "losses[0]"])
    dropped.setdefault(kind, []).append(ident)
    return f"dropped {ident}"


def reorder_steps(data: dict, rng: random.Random) -> str | None:
    steps = data["steps"]
    if len(steps) < 2:
        return None
    i, j = sorted(rng.sample(range(len(steps)), 2))
    change = rng.choice(["swap", "duplicate", "delete"])
    if change == "swap":
        steps[i], steps[j] = steps[j], steps[i]
    elif change == "duplicate":
        steps.insert(j, copy.deepcopy(steps[i]))
    else:
        del steps[i]
    return f"steps {i}, {j}: {change}"


def alter_step(data: dict, rng: random.Random) -> str | None:
    step = rng.choice(data["steps"])
    change = rng.choice(["line", "phase", "capped", "ok", "stdout"])
    if change == "line":
        step["line"] = rng.choice([-1, 0, 10**6])
    elif change == "phase":
        step.update(phase="backward", node=_some_id(data, rng, "nodes"),
                    received=[_some_id(data, rng, "tensors")], sent=[None, _some_id(data, rng, "tensors")])
    elif change == "capped":  # past a cap references may dangle: a forger can say so at every step
        step["capped"] = {"tensors": 1, "nodes": 1}
        alter_reference(data, rng)
    elif change == "ok":
        data["ok"] = not data["ok"]
    else:
        step["stdout"] = "x" * 70_000
    return f"step {change}"


MUTATIONS: tuple[Mutation, ...] = (delete_fact, duplicate_fact, alter_reference, alter_layout, alter_values,
                                   alter_drops, reorder_steps, alter_step)


def mutate(data: dict, rng: random.Random, count: int = 1) -> list[str]:
    done = []
    for _ in range(count):
        said = rng.choice(MUTATIONS)(data, rng)
        if said is not None:
            done.append(said)
    return done
