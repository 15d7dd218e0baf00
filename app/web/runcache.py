"""The run cache: a code run before is answered again without a sandboxed run.

Runs are seeded, so one code gives one trace — given everything else that decides it, all of which
is in the key (``RunCache.key``): the code; the run's options (every option a run takes goes in
``options``, whatever it is); the limits of a run; the engine, i.e. the source of the whole ``app``
package and the versions of Python, torch and numpy (``ENGINE``); and the machine's CPU (torch picks
its kernels by the CPU's features, and their floats differ in the last bits between AVX2 and
AVX-512).

What is kept is only what a fresh run would give again (``keepable``):

* a run that ended by itself: well, with the snippet's own error, refused by the gate, or cut by a
  step or output cap. Never one cut by wall time, CPU time or memory (those depend on the load and
  the machine's state), nor an internal failure;
* of a snippet that names no source of values that differ between processes (``VOLATILE``: the
  generators reseeded from the OS, ``id()``, data pointers) and whose trace shows no address (a
  default ``repr``, ``<MulBackward0 object at 0x7f…>``): those are whatever the process that ran them
  had, so another replica's would differ.

Two levels: this process's own LRU (``EXPLORER_CACHE_MIB``, 0: none) and, with ``EXPLORER_CACHE_URL``
(Redis), one shared by every replica, bounded in bytes (``EXPLORER_CACHE_SHARED_MIB``) by the cache
itself whatever the server's eviction policy, evicting the least recently used. An entry is the
trace's JSON, compressed, with the seconds its run took; read back, it is untrusted input like the
sandbox's answer and goes through the same validation (``app.sandbox.runner.parse_result``: schema,
then consistency) and the same ``keepable`` test — an entry that fails is dropped and the code runs.
Only traces are shared: what the server draws from them (page fragments, pictures) could not be
checked that way, so each process keeps its own drawings (``drawn``, ``app.web.gates.Drawing``).

A hit is said in ``Server-Timing``: ``cache;desc="hit";dur=`` (the lookup and validation) and
``saved;dur=`` (the time the answer took when it was made: the run's sandbox time, and for a drawing
the work too); a miss has ``cache;desc="miss";dur=`` beside ``sandbox;dur=``.
Redis unreachable: the shared level is skipped (``app.web.shared.Breaker``) and runs go on.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.metadata
import logging
import platform
import re
import struct
import sys
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from app.config import Settings
from app.sandbox.frames import encode_frame
from app.sandbox.runner import bounds_for, parse_result
from app.schema import DeltaTrace, RunError
from app.web.shared import Breaker, redis_options

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]

# The settings a trace depends on (the rest — ports, pools, the database — only serve it).
TRACE_SETTINGS = ("sandbox", "unsafe_dev", "policy_gate", "testing", "max_steps", "max_stdout_bytes",
                  "max_code_bytes", "max_result_bytes", "wall_seconds", "cpu_seconds", "memory_mib")
# Error kinds that the snippet alone decides (with the key's limits): "runtime" (its exception),
# "rejected" (the gate, a forbidden system call), "output" (a step or output cap).
KEPT_KINDS = ("runtime", "rejected", "output")
# ... except these: a crash by signal or an odd exit may be the allocator failing under memory pressure
NOT_KEPT_CODES = ("runtime.crash", "runtime.process_exit")
NOT_KEPT_TYPES = ("MemoryError", "ServerBudget")  # (the second: a page drawn without its views)
# Names in a snippet that reach values the seed does not fix: reseeding from the OS (a ``seed()``
# call without an argument, ``default_rng()``), the system's randomness, object addresses.
VOLATILE = re.compile(rb"\b(?:seed|default_rng)\s*\(\s*\)|\b(?:id|data_ptr|SystemRandom|urandom|getrandom)\b")
ADDRESS = re.compile(rb"0x[0-9a-fA-F]{8,}")  # a default repr's "at 0x7f3a9c…", as a trace carries it
MAGIC = b"AXC1"
HEAD = struct.Struct("<4sd")  # magic, the run's seconds in the sandbox


def _versions() -> dict[str, str]:
    found = {"python": sys.version, "machine": platform.machine()}
    for package in ("torch", "numpy"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "absent"
    return found


def cpu_features() -> str:
    """The CPU's vendor and feature flags (what torch and its libraries choose kernels by)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.processor()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor is enough: a machine's cores share their features
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    flags = fields.get("flags") or fields.get("Features") or ""
    return " ".join([fields.get("vendor_id", fields.get("CPU implementer", "")), *sorted(flags.split())])


def engine_fingerprint() -> str:
    """What makes this build's traces: every source file of the app (the engine, the sandbox, the
    gate, the schema, the validation; and, for what is drawn from a trace, the renderers and their
    message catalogs), the versions beneath it, and the CPU."""
    digest = hashlib.sha256()
    for path in sorted([*(ROOT / "app").rglob("*.py"), *(ROOT / "app").rglob("*.po")]):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(orjson.dumps(_versions(), option=orjson.OPT_SORT_KEYS))
    digest.update(cpu_features().encode())
    return digest.hexdigest()


ENGINE = engine_fingerprint()


def ended_by_itself(error: RunError | None) -> bool:
    """Whether a run with this ``error`` ended as any run of its code ends: not cut by time, memory
    or a failure."""
    return error is None or (error.kind in KEPT_KINDS and error.code not in NOT_KEPT_CODES
                             and error.type not in NOT_KEPT_TYPES)


def volatile(code: str, shown: bytes) -> bool:
    """Whether ``code`` names a value the seed does not fix, or what it made (``shown``: the trace's
    JSON, a picture) shows an address of the process that ran it."""
    named = VOLATILE.search(code.encode("utf-8", "surrogatepass")) is not None
    return named or ADDRESS.search(shown) is not None


def keepable(code: str, trace: DeltaTrace, document: bytes) -> bool:
    """Whether a fresh run of ``code`` would give ``trace`` (as JSON, ``document``) again: the module's
    docstring says what that takes."""
    return ended_by_itself(trace.error) and not volatile(code, document)


@dataclass(frozen=True)
class Hit:
    trace: DeltaTrace
    seconds: float  # what the run took in the sandbox when it was made


class MemoryStore:
    """This process's LRU of entries, bounded in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.max_entry = max_bytes // 8
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self.bytes = 0

    def get(self, key: str) -> bytes | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: str, entry: bytes) -> None:
        if len(entry) > self.max_entry:
            return
        with self._lock:
            self.bytes += len(entry) - len(self._entries.pop(key, b""))
            self._entries[key] = entry
            while self.bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self.bytes -= len(dropped)

    def drop(self, key: str) -> None:
        with self._lock:
            self.bytes -= len(self._entries.pop(key, b""))

    def health(self) -> dict[str, Any]:
        return {"entries": len(self._entries), "bytes": self.bytes, "max_bytes": self.max_bytes}


# Keys share one hash tag, so the scripts below touch one slot (Redis Cluster allows that).
PREFIX = "explorer-cache:{runs}:"
LRU, SIZES, TOTAL = PREFIX + "lru", PREFIX + "sizes", PREFIX + "bytes"
# Read an entry and mark it used.
GET_SCRIPT = """
local entry = redis.call('GET', KEYS[1])
if entry then redis.call('ZADD', KEYS[2], 'XX', ARGV[1], KEYS[1]) end
return entry
"""
# Write an entry, then evict the least recently used until the whole cache fits its bound.
PUT_SCRIPT = """
local size = string.len(ARGV[1])
local old = tonumber(redis.call('HGET', KEYS[3], KEYS[1]) or '0')
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[3], KEYS[1], size)
redis.call('ZADD', KEYS[2], ARGV[2], KEYS[1])
local total = redis.call('INCRBY', KEYS[4], size - old)
local limit = tonumber(ARGV[3])
while total > limit do
  local oldest = redis.call('ZPOPMIN', KEYS[2])
  if #oldest == 0 then break end
  local member = oldest[1]
  local freed = tonumber(redis.call('HGET', KEYS[3], member) or '0')
  redis.call('HDEL', KEYS[3], member)
  redis.call('DEL', member)
  total = redis.call('DECRBY', KEYS[4], freed)
end
return total
"""


class RedisStore:
    """The entries every replica shares, in Redis, bounded in bytes by ``PUT_SCRIPT``."""

    def __init__(self, url: str, max_bytes: int) -> None:
        import redis

        self.max_bytes = max_bytes
        self.max_entry = max_bytes // 8
        self.client = redis.Redis.from_url(url, **redis_options())
        self.breaker = Breaker("cache", url)
        self._get = self.client.register_script(GET_SCRIPT)
        self._put = self.client.register_script(PUT_SCRIPT)

    def _call(self, action: Any, default: Any = None) -> Any:
        if not self.breaker.allows():
            return default
        try:
            answer = action()
        except Exception as error:  # noqa: BLE001 - any failure of the store is an outage, never a 500
            self.breaker.failed(error)
            return default
        self.breaker.succeeded()
        return answer

    def get(self, key: str) -> bytes | None:
        found = self._call(lambda: self._get(keys=[PREFIX + key, LRU], args=[time.time()]))
        return found if isinstance(found, bytes) else None

    def put(self, key: str, entry: bytes) -> None:
        if len(entry) <= self.max_entry:
            self._call(lambda: self._put(keys=[PREFIX + key, LRU, SIZES, TOTAL],
                                         args=[entry, time.time(), self.max_bytes]))

    def drop(self, key: str) -> None:
        self._call(lambda: self.client.eval(
            "redis.call('ZREM', KEYS[2], KEYS[1]); redis.call('DEL', KEYS[1]); "
            "local s = tonumber(redis.call('HGET', KEYS[3], KEYS[1]) or '0'); "
            "redis.call('HDEL', KEYS[3], KEYS[1]); return redis.call('DECRBY', KEYS[4], s)",
            4, PREFIX + key, LRU, SIZES, TOTAL))

    def health(self) -> dict[str, Any]:
        """Asks Redis (bounded by the store's timeout): blocking."""
        used = self._call(lambda: self.client.get(TOTAL), default=None)
        state = {**self.breaker.health(), "max_bytes": self.max_bytes}
        if state["ok"]:
            state["bytes"] = int(used or 0)
        return state


class RunCache:
    """``key`` a run, ``get`` it back validated, ``put`` what a run gave. ``get`` and ``put`` block
    (Redis, validation, compression): call them in a worker thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.limits = orjson.dumps({name: getattr(settings, name) for name in TRACE_SETTINGS},
                                   option=orjson.OPT_SORT_KEYS, default=str)
        self.local = MemoryStore(settings.cache_mib << 20) if settings.cache_mib > 0 else None
        self.shared = RedisStore(settings.cache_url, settings.cache_shared_mib << 20) \
            if settings.cache_url else None
        self.hits = self.misses = self.refused = 0

    @property
    def enabled(self) -> bool:
        return self.local is not None or self.shared is not None

    def key(self, code: str, options: Mapping[str, Any] | None = None) -> str:
        """Everything that decides the trace of ``code``, hashed."""
        what = orjson.dumps({"options": dict(options or {})}, option=orjson.OPT_SORT_KEYS, default=str)
        digest = hashlib.sha256(ENGINE.encode() + b"\0" + self.limits + b"\0" + what + b"\0")
        digest.update(code.encode("utf-8", "surrogatepass"))
        return digest.hexdigest()

    def drawing_key(self, code: str, options: Mapping[str, Any] | None, *params: str) -> str:
        """What is drawn from the run of ``code`` with ``options`` (a page's fragment, a picture): its
        run's key and what else the drawing depends on (the template, the step, the view, the language...)."""
        what = "\0".join((self.key(code, options), *params)).encode("utf-8", "surrogatepass")
        return "drawn:" + hashlib.sha256(what).hexdigest()

    def drawn(self, key: str) -> tuple[str, float] | None:
        """A drawing this process kept, and the seconds it took to make. Only this process's own LRU:
        a drawing cannot be checked like a trace, so none is shared."""
        entry = self.local.get(key) if self.local is not None else None
        if entry is None:
            return None
        _, seconds = HEAD.unpack_from(entry)
        return zlib.decompress(entry[HEAD.size:]).decode(), seconds

    def keep_drawn(self, key: str, code: str, text: str, seconds: float) -> bool:
        """Keep a drawing whose run ended by itself and which shows nothing process-specific (the caller
        knows the first); True when kept."""
        data = text.encode()
        if self.local is None or volatile(code, data):
            return False
        self.local.put(key, HEAD.pack(MAGIC, seconds) + zlib.compress(data, 1))
        return True

    def get(self, key: str, code: str) -> Hit | None:
        for store in (self.local, self.shared):
            if store is None:
                continue
            entry = store.get(key)
            if entry is None:
                continue
            hit = self._read(entry, code)
            if hit is None:
                self.refused += 1
                log.warning("run cache: an entry that is not a valid trace of its code was dropped")
                store.drop(key)
                continue
            if store is self.shared and self.local is not None:
                self.local.put(key, entry)
            self.hits += 1
            return hit
        self.misses += 1
        return None

    def put(self, key: str, code: str, trace: DeltaTrace, seconds: float) -> bool:
        """Keep ``trace`` when a fresh run would give it again; True when kept."""
        if not self.enabled:
            return False
        document = trace.model_dump_json().encode()
        if not keepable(code, trace, document):
            return False
        entry = HEAD.pack(MAGIC, seconds) + zlib.compress(document, 1)
        for store in (self.local, self.shared):
            if store is not None:
                store.put(key, entry)
        return True

    def _read(self, entry: bytes, code: str) -> Hit | None:
        """An entry as the sandbox's answer is read: untrusted until validated."""
        settings = self.settings
        if len(entry) < HEAD.size:
            return None
        magic, seconds = HEAD.unpack_from(entry)
        if magic != MAGIC or not 0 <= seconds <= settings.wall_seconds + 60:
            return None
        inflate = zlib.decompressobj()
        try:
            document = inflate.decompress(entry[HEAD.size:], settings.max_result_bytes + 1)
        except zlib.error:
            return None
        if len(document) > settings.max_result_bytes or not inflate.eof or inflate.unused_data:
            return None
        trace = parse_result(encode_frame(document), settings.max_result_bytes, bounds_for(code, settings))
        if not keepable(code, trace, document):  # an unusable answer is an "internal" error: refused too
            return None
        return Hit(trace, seconds)

    def health(self) -> dict[str, Any]:
        state: dict[str, Any] = {"hits": self.hits, "misses": self.misses, "refused": self.refused,
                                 "local": self.local.health() if self.local else None}
        state["shared"] = self.shared.health() if self.shared is not None else None
        return state
