"""The trace engine: the only package (with the worker) that imports torch."""

from app.engine.run import EngineLimits, trace_delta, trace_snippet

__all__ = ["EngineLimits", "trace_delta", "trace_snippet"]
