"""Command line: ``python -m app serve [--host H] [--port P | --fd N]``, ``python -m app trace FILE`` and
``python -m app render FILE -o OUT`` (.html, .svg or .txt)."""

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
    serve.add_argument("--fd", type=int, default=None,
                       help="listen on this inherited, bound socket instead of --host/--port "
                            "(socket activation; a test harness that holds its port from the start)")
    trace = commands.add_parser("trace", help="print a snippet's trace as JSON")
    trace.add_argument("file", help="a Python file, or - for standard input")
    trace.add_argument("--format", choices=("v1", "delta"), default="v1",
                       help="v1: every step whole (default); delta: each step only what it changed")
    render = commands.add_parser(
        "render", help="run a snippet here and write its views: a standalone page, a picture or text",
        description="Run FILE in this process (no sandbox: your code on your machine, under the server's "
                    "step, output, size and time limits) and write what the playground shows of it.")
    render.add_argument("file", help="a Python file, or - for standard input")
    render.add_argument("-o", "--output", required=True,
                        help="where to write: .html (a standalone page that works offline), .svg (the "
                             "picture of one step, as /render.svg draws it) or .txt (a text view per step); "
                             "- prints the text view")
    render.add_argument("--step", type=int, default=None,
                        help="the step an .svg draws (1, 2, …; default: the last)")
    render.add_argument("--lang", default="en", help="the language of the views: en (default) or zh-CN")
    render.add_argument("--cuda-on-cpu", action="store_true",
                        help="run code written for a GPU (.cuda(), device='cuda') on the CPU, shown as cuda")
    args = parser.parse_args(argv)

    if args.command == "render":
        return _render(args.file, args.output, args.step, args.lang, args.cuda_on_cpu)

    if args.command == "serve":
        _in_serve_environment(argv)
        import uvicorn

        from app.config import get_settings
        from app.serving import serve_inherited, uvicorn_options
        from app.web.main import create_app

        settings = get_settings()
        if args.fd is not None:
            return serve_inherited(create_app(settings), args.fd, **uvicorn_options(settings))
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


def _in_serve_environment(argv: list[str] | None) -> None:
    """Start this same command again, same process, in the environment the server runs in
    (``app.heap.serve_environment``: Python's allocator is chosen before the interpreter starts),
    unless it already is: so ``python -m app serve``, ``scripts/serve`` and the Docker image all run
    the server as it was measured, with nothing for the user to set."""
    import os

    from app.heap import serve_environment

    environment = serve_environment(os.environ)
    if environment is None:
        return
    command = sys.orig_argv[1:] if argv is None else ["-m", "app", *argv]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *command], environment)


def _render(file: str, output: str, step: int | None, lang: str, cuda_on_cpu: bool = False) -> int:
    from pathlib import Path

    from app.local import run_here
    from app.report import RenderedRun

    kind = "txt" if output == "-" else Path(output).suffix.lstrip(".").lower()
    if kind not in ("html", "svg", "txt"):
        print(f"python -m app render: cannot tell the format of {output!r}: name it .html, .svg or .txt",
              file=sys.stderr)
        return 2
    source = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    ran = run_here(source, cuda_on_cpu=cuda_on_cpu)
    title = "stdin" if file == "-" else Path(file).name
    rendered = RenderedRun(ran.trace, source, ran.limits, title, ran.measured, lang)
    text = rendered.svg(None if step is None else step - 1) if kind == "svg" else rendered.as_format(kind)
    if output == "-":
        sys.stdout.write(text)
    else:
        Path(output).write_text(text, encoding="utf-8")
    return 0 if ran.trace.ok else 1


if __name__ == "__main__":
    sys.exit(main())
