"""The FastAPI application factory."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from app.config import Settings, get_settings
from app.sandbox.runner import Runner, SubprocessRunner
from app.web import api


def create_app(settings: Settings | None = None, runner: Runner | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(title="Autograd Explorer", docs_url="/api/docs", redoc_url=None)
    app.state.settings = settings
    app.state.runner = runner or SubprocessRunner(settings)
    app.include_router(api.router)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # A clear 422 that names what is wrong, without echoing the (possibly huge) body back.
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]]
        return JSONResponse({"detail": "Bad request", "problems": problems}, status_code=422)

    return app
