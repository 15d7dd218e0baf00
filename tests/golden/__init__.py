"""Golden v1 traces recorded from the engine (see ``record.py``), read by ``load``."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

V1 = Path(__file__).with_name("v1.jsonl.gz")


@dataclass(frozen=True)
class Golden:
    source: str
    max_steps: int
    max_stdout: int
    result: dict

    @property
    def name(self) -> str:
        first = self.source.strip().split("\n", 1)[0]
        return first[:60]


def load() -> Iterator[Golden]:
    with gzip.open(V1, "rt", encoding="utf-8") as stream:
        for line in stream:
            yield Golden(**json.loads(line))
