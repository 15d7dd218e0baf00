"""``NestedValues`` tries the list right after float (the fast order, ``app.schema``): it accepts and
rejects exactly what the scalars-first union did, gives the same Python values, and its JSON schema
reads as it always did. A fact's ``values`` (``Values``: plain rows proved by their items' types and
kept as sent, the rest left to the union) do too."""

from __future__ import annotations

import decimal
import json
import math
import random
from typing import Any

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypeAliasType

from app.schema import DeltaTrace, NestedValues, Scalar, TensorFact, Values

ScalarsFirst = TypeAliasType("ScalarsFirst", "Scalar | list[ScalarsFirst]")  # the order it had
OLD, NEW, FIELD = TypeAdapter(ScalarsFirst), TypeAdapter(NestedValues), TypeAdapter(Values)
ODD = [0, 1, -1, 2**70, 1.5, -0.0, math.inf, math.nan, True, False, None, "x", "1.5", "NaN", "", b"1",
       bytearray(b"1"), decimal.Decimal("2"), 3 + 0j, object()]


def _value(rng: random.Random, depth: int = 0) -> Any:
    if depth < 5 and rng.random() < 0.4:
        items = [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
        kind = rng.choice(["list", "list", "tuple", "set", "dict"])
        if kind == "dict":
            return {str(i): v for i, v in enumerate(items)}
        if kind == "set":
            try:
                return set(items)
            except TypeError:
                return set()
        return items if kind == "list" else tuple(items)
    return rng.choice(ODD)


def _outcome(adapter: TypeAdapter, value: Any, json_mode: bool) -> str:
    try:
        out = adapter.validate_json(value) if json_mode else adapter.validate_python(value)
    except ValidationError:
        return "rejected"

    def typed(item: Any) -> Any:
        return [typed(i) for i in item] if isinstance(item, list) else [type(item).__name__, repr(item)]
    return repr(typed(out))


def test_the_fast_union_validates_as_the_scalars_first_one() -> None:
    rng = random.Random(3)
    outcomes = set()
    for _ in range(1500):
        value = _value(rng)
        found = _outcome(NEW, value, False)
        assert found == _outcome(OLD, value, False), value
        outcomes.add(found == "rejected")
        if not isinstance(value, set):
            text = json.dumps(value, default=str)
            assert _outcome(NEW, text, True) == _outcome(OLD, text, True), text
    for depth in (64, 254, 255, 300):  # pydantic's own depth limit, the same for both
        text = "[" * depth + "1.0" + "]" * depth
        assert _outcome(NEW, text, True) == _outcome(OLD, text, True), depth
    assert outcomes == {True, False}


def test_a_facts_values_validate_as_the_scalars_first_union() -> None:
    rng = random.Random(5)
    plain = [1.5, -2, True, None, "NaN", 2**70, math.nan, -0.0]
    shaped = [rng.choice(plain), [], [[]], plain, [plain, plain[::-1]], [plain, [1.0, [2.0]]], [[1.0], 2.0],
              [[[1.0, 2.0]], [[3.0, 4.0]]], [(1.0,), [2.0]], (1.0, 2.0), [1.0, (2.0,)], {"a": 1.0},
              [{"a": 1}], [decimal.Decimal("2")], [[b"1"]], [True, False], [[object()]]]
    shaped += [_value(rng) for _ in range(1500)]
    for value in shaped:
        assert _outcome(FIELD, value, False) == _outcome(OLD, value, False), value
        if not isinstance(value, set):
            text = json.dumps(value, default=str)
            assert _outcome(FIELD, text, True) == _outcome(OLD, text, True), text
    for depth in (64, 254, 255, 300):
        text = "[" * depth + "1.0" + "]" * depth
        assert _outcome(FIELD, text, True) == _outcome(OLD, text, True), depth
    rows = [[1.0, 2.0], [3.0, float("nan")]]
    fact = {"shape": [2, 2], "dtype": "float32", "stride": [2, 1], "storage_offset": 0, "storage": "s1",
            "requires_grad": False, "is_leaf": True, "grad_fn": None, "grad": None, "base": None,
            "version": 0, "values": rows}
    assert TensorFact.model_validate(fact).values is rows  # kept as sent: not built again item by item
    assert TensorFact.model_json_schema()["properties"]["values"] == \
        TensorFact.model_json_schema(mode="serialization")["properties"]["values"]


def test_its_json_schema_lists_the_scalars_first() -> None:
    schema = DeltaTrace.model_json_schema()["$defs"]["NestedValues"]
    before = TypeAdapter(list[ScalarsFirst]).json_schema()["$defs"]["ScalarsFirst"]
    assert json.dumps(schema) == json.dumps(before).replace("ScalarsFirst", "NestedValues")
    assert [choice.get("type") for choice in schema["anyOf"]][-2:] == ["array", "null"]
    assert Scalar == float | int | bool | str | None
