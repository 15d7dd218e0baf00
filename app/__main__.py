"""Command line: ``python -m app serve [--host H] [--port P]`` and ``python -m app trace FILE``."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app", description="Autograd Explorer")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="start the web server")
    serve.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8000)")
    trace = commands.add_parser("trace", help="print a snippet's trace as JSON")
    trace.add_argument("file", help="a Python file, or - for standard input")
    trace.add_argument("--format", choices=("v1", "delta"), default="v1",
                       help="v1: every step whole (default); delta: each step only what it changed")
    args = parser.parse_args(argv)

    if args.command == "serve":
        import uvicorn

        from app.config import get_settings
        from app.serving import uvicorn_options
        from app.web.main import create_app

        settings = get_settings()
        uvicorn.run(
            create_app(settings),
            host=args.host or settings.host,
            port=args.port or settings.port,
            **uvicorn_options(settings),  # bounded connections, idle time, heads (docs/self-host.md)
        )
        return 0

    from pathlib import Path

    from app.engine import EngineLimits, trace_delta
    from app.schema import DeltaTrace
    from app.trace.delta import expand

    source = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    result = trace_delta(source, EngineLimits())
    if args.format == "v1":
        result = expand(DeltaTrace.model_validate(result)).model_dump()
    json.dump(result, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
