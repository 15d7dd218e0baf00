"""Pure view models: a validated trace (``DeltaTrace``) in, numbers and strings for the templates out.

Nothing here imports torch, FastAPI or Jinja: the playground page, the embed mode and the SVG export
all build on the same functions. ``build_explorer`` is the entry point.
"""

from app.render.explorer import ExplorerView, build_explorer, client_payload, frame_at

__all__ = ["ExplorerView", "build_explorer", "client_payload", "frame_at"]
