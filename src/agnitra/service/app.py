"""The REST API (`/v1`, OpenAPI at `/v1/openapi.json`) over the same `api` and store as the CLI.

Every endpoint but `/v1/health` and `/metrics` takes an API key or, where the server trusts an
OIDC issuer, a token (`access.caller`), limits each caller's request rate, and checks its role on
the project concerned: viewer reads, editor imports models and submits jobs, admin makes
projects and keys and reads the audit log. Every change writes an audit entry. Jobs run in workers
(`agnitra worker`, or `serve --workers N`), never in the server. The routes live in `routes/`, one
module a resource.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError

from agnitra.errors import UserError, first_line
from agnitra.service.keys import KeyCache
from agnitra.service.oidc import OidcSettings, OidcVerifier
from agnitra.service.ratelimit import RateLimiter
from agnitra.service import web
from agnitra.service.routes import audit, datasets, export, jobs, models, projects, recipes, status, targets
from agnitra.store import open_store

ROUTERS = [status, projects, models, datasets, targets, jobs, recipes, export, audit, web]  # web: the UI at / and /ui/
MAX_JSON_BYTES = 1 << 20
CONNECTIONS = 48  # the store's pool: one a request thread (the threadpool holds 40)


@dataclass
class ServiceConfig:
    db_url: str
    data_dir: Path
    max_upload_bytes: int = 2 << 30
    allow_pickle: bool = False  # pickled uploads run code when loaded: refused unless the server opted in
    cors_origins: list[str] = field(default_factory=list)
    oidc: OidcSettings | None = None  # bearer tokens from this issuer beside API keys
    rate_limit: int = 600  # requests a minute per key or token subject; 0: no limit


def create_app(config: ServiceConfig) -> FastAPI:
    store = open_store(config.db_url, connections=CONNECTIONS)
    app = FastAPI(title="Agnitra", version="1", openapi_url="/v1/openapi.json", docs_url="/v1/docs", redoc_url=None)
    app.state.store, app.state.config = store, config
    app.state.oidc = OidcVerifier(config.oidc) if config.oidc else None
    app.state.limiter = RateLimiter(config.rate_limit) if config.rate_limit else None
    app.state.keys = KeyCache()
    _middleware(app, config)
    for module in ROUTERS:
        app.include_router(module.router)
    return app


def _middleware(app: FastAPI, config: ServiceConfig) -> None:
    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=config.cors_origins, allow_methods=["GET", "POST"], allow_headers=["Authorization", "X-API-Key", "Content-Type", "Idempotency-Key"])

    app.add_middleware(_LimitsAndHeaders, max_upload_bytes=config.max_upload_bytes)

    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError):
        return JSONResponse({"detail": str(exc)}, status_code=422)

    @app.exception_handler(DataError)
    async def data_error(request: Request, exc: DataError):  # the request's value the database refused: too long, a NUL, out of range
        return JSONResponse({"detail": f"the database refuses a value of the request ({first_line(exc.orig)}); shorten or fix it"}, status_code=422)


SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer"),
                    (b"content-security-policy", b"default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'")]


class _LimitsAndHeaders:
    """Plain ASGI (no per-request task, unlike an http middleware): a body over the size limit is
    refused from its Content-Length, and every response carries the security headers."""

    def __init__(self, app, max_upload_bytes: int) -> None:
        self.app, self.max_upload_bytes = app, max_upload_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        length = int(headers.get(b"content-length", b"0") or 0)
        limit = self.max_upload_bytes + (1 << 20) if headers.get(b"content-type", b"").startswith(b"multipart/") else MAX_JSON_BYTES
        if length > limit:
            return await JSONResponse({"detail": "the request is over the server's size limit"}, status_code=413)(scope, receive, send)

        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)
