"""The FastAPI application factory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from app.config import Settings, get_settings
from app.heap import tune_malloc
from app.sandbox.admission import Admission
from app.sandbox.runner import Runner
from app.sandbox.runners import default_runner
from app.shortlinks import open_store
from app.web import accept, api, download, embed, links, locale, pages, render_svg, stops
from app.web.after import AfterAnswer
from app.web.clients import trusted_networks
from app.web.framing import FramingPolicy
from app.web.limits import RequestLimits
from app.web.locale import LocaleMiddleware
from app.web.pacing import Paced
from app.web.preload import preload
from app.web.rate import RateLimiter
from app.web.runcache import RunCache


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    # before the server listens (uvicorn runs the lifespan first): its accepts back off when out of
    # descriptors instead of filling the event loop with retries (app/web/accept.py)
    accept.install(asyncio.get_running_loop())
    runner = app.state.runner
    if hasattr(runner, "astart"):
        await runner.astart()  # start the sandbox now, so /healthz tells the truth from the start
    yield
    app.state.links.close()  # hand database connections back on shutdown
    if hasattr(runner, "aclose"):
        await runner.aclose()  # stops the fork server and its children


def create_app(settings: Settings | None = None, runner: Runner | None = None) -> FastAPI:
    settings = settings or get_settings()
    tune_malloc()  # before the worker threads exist: see app/heap.py
    preload()  # what the server keeps for good, before requests fragment the heap
    app = FastAPI(title="Autograd Explorer", docs_url="/api/docs", redoc_url=None, lifespan=_lifespan)
    app.state.settings = settings
    app.state.runner = runner or default_runner(settings)
    app.state.admission = Admission(settings.max_running, settings.max_queued, settings.queue_wait_seconds)
    trusted_networks(settings.trusted_proxies)  # a bad EXPLORER_TRUSTED_PROXIES stops the start
    app.state.rate_limiter = RateLimiter(settings.rate_per_minute, settings.rate_burst, settings.rate_storage)
    app.state.run_cache = RunCache(settings)
    app.state.links = open_store(settings)
    app.state.stops = stops.Stops()
    app.include_router(api.router)
    app.include_router(links.router)
    app.include_router(embed.router)
    app.include_router(render_svg.router)
    app.include_router(download.router)
    app.include_router(locale.router)
    app.include_router(stops.router)
    app.include_router(pages.router)  # before /static: it serves /static/vendor/htmx.min.js
    app.mount("/static", StaticFiles(directory=pages.ROOT / "static"), name="static")
    # Bodies are bounded (size, arrival time) before any route reads them; inside the framing policy,
    # so a 413 carries the same headers as every answer.
    app.add_middleware(RequestLimits, max_body_bytes=settings.body_limit, body_seconds=settings.body_seconds)
    app.add_middleware(AfterAnswer)  # what a request made is freed beside the sending of its answer
    app.add_middleware(FramingPolicy)  # only /embed may be framed by other sites
    # A 500-step trace is megabytes of JSON or markup and about 5 % of that gzipped; bodies over
    # 128 KiB are compressed in a worker thread, off the event loop.
    app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=5)
    # Outermost: every answer, the limits' 413/408 included, is made in the request's language.
    app.add_middleware(LocaleMiddleware)
    # Outside even that: answers go out piece by piece as the client reads them (app/web/pacing.py).
    app.add_middleware(Paced, client_pending_bytes=settings.client_pending_bytes)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # A clear 422 that names what is wrong, without echoing the (possibly huge) body back.
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]]
        return JSONResponse({"detail": "Bad request", "problems": problems}, status_code=422)

    return app
