"""`agnitra serve`: the API server (Uvicorn) and, with `--workers N`, N worker processes beside it
that die with it; on a store without keys, a first admin key is made and shown once. With an OIDC
issuer (flag, AGNITRA_OIDC_ISSUER or agnitra.toml), its discovery document and keys are read at
start: a server that cannot check tokens does not start."""

from __future__ import annotations

import gc
import multiprocessing
import sys
import threading
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from agnitra.config import load_settings
from agnitra.errors import UserError, first_line
from agnitra.service import keys, queue
from agnitra.service.app import ServiceConfig, create_app
from agnitra.service.executor import check_executor
from agnitra.service.oidc import IssuerUnavailable, OidcSettings
from agnitra.service.worker import WorkerConfig, run_worker
from agnitra.store import open_store, store_url
from agnitra.store.service_schema import ApiKeyRow

KEEPER_S = 2.0  # how often dead workers are replaced and lapsed leases requeued


def first_admin_key(db_url: str) -> str | None:
    """An admin key for every project where the store holds no key yet (shown once), else None."""
    store = open_store(db_url)
    try:
        with store.session() as session:
            if session.scalar(select(func.count()).select_from(ApiKeyRow)):
                return None
            _, key = keys.create_key(session, "first admin (made by agnitra serve)", "admin")
            return key
    finally:
        store.close()


def make_key(name: str, role: str, project: str | None, db_url: str | None = None, organisation: str | None = None) -> str:
    store = open_store(db_url or store_url())
    try:
        with store.session() as session:
            _, key = keys.create_key(session, name, role, project, organisation)
            return key
    finally:
        store.close()


def oidc_settings(issuer: str | None, audience: str | None, claim_prefix: str) -> OidcSettings | None:
    """The issuer whose tokens the server takes (flags over AGNITRA_OIDC_* over agnitra.toml), or None."""
    settings = load_settings().with_overrides(oidc_issuer=issuer, oidc_audience=audience)
    if not settings.oidc_issuer and not settings.oidc_audience:
        return None
    if not settings.oidc_issuer or not settings.oidc_audience:
        missing = "--oidc-audience (the audience its tokens carry)" if settings.oidc_issuer else "--oidc-issuer (the URL of the issuer)"
        raise UserError(f"OIDC tokens need an issuer and an audience: pass {missing} too, or neither for API keys only")
    if not settings.oidc_issuer.startswith(("https://", "http://")):
        raise UserError(f"--oidc-issuer must be the issuer's http(s) URL, got {settings.oidc_issuer!r}")
    return OidcSettings(settings.oidc_issuer, settings.oidc_audience, claim_prefix)


def serve(host: str, port: int, workers: int, data_dir: Path, db_url: str | None = None, max_upload_mb: int = 2048, allow_pickle: bool = False,
          cors_origins: list[str] | None = None, oidc: OidcSettings | None = None, rate_limit: int = 600, announce=print,
          executor: str = "local") -> None:
    import uvicorn

    check_executor(executor)  # `--executor ray` without Ray: one line before anything starts

    url = db_url or store_url()
    data_dir.mkdir(parents=True, exist_ok=True)
    config = ServiceConfig(url, data_dir, max_upload_bytes=max_upload_mb << 20, allow_pickle=allow_pickle, cors_origins=cors_origins or [],
                           oidc=oidc, rate_limit=rate_limit)
    app = create_app(config)  # opens (and migrates) the store here, before any thread: Alembic's globals are not thread-safe
    if app.state.oidc:
        try:
            app.state.oidc.discover()
        except IssuerUnavailable as exc:
            app.state.store.close()
            raise UserError(f"the OIDC issuer {oidc.issuer} cannot be used: {exc}; fix --oidc-issuer or start the server without it") from exc
    key = first_admin_key(url)
    if key:
        announce(f"first admin key (shown once; keep it): {key}")
    keeper = _Workers(app.state.store, url, data_dir, workers, executor)
    keeper.start()
    tokens = f", OIDC tokens from {oidc.issuer}" if oidc else ""
    limit = f"{rate_limit} requests a minute per caller" if rate_limit else "no rate limit"
    announce(f"serving on http://{host}:{port} (OpenAPI at /v1/openapi.json), {workers} worker(s){' running jobs as Ray tasks' if executor == 'ray' else ''}, store {url.split('@')[-1]}{tokens}, {limit}")
    # the imports' ~250k objects out of the collector's reach: a full collection over them took 0.3 s, stalling every request in flight
    gc.collect()
    gc.freeze()
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        keeper.stop()


class _Workers(threading.Thread):
    """Keeps `count` worker processes running (one that died is started again) and queues again the
    jobs whose worker stopped renewing its lease, also where no worker is left to do it."""

    def __init__(self, store, db_url: str, data_dir: Path, count: int, executor: str = "local") -> None:
        super().__init__(daemon=True)
        self.store, self.db_url, self.data_dir, self.count, self.executor = store, db_url, data_dir, count, executor
        self.children: list = []
        self.stopping = threading.Event()

    def start(self) -> None:
        """The first local workers are forked from this process while it runs no other thread (on
        Linux): they start without a fresh interpreter's seconds of imports. A worker that replaces
        a dead one is spawned: by then Uvicorn's threads run here."""
        if self.executor == "local" and sys.platform.startswith("linux") and threading.active_count() == 1:
            self.store.engine.dispose()  # no connection of this process's open in a forked worker
            self._fill(multiprocessing.get_context("fork"))
        super().start()

    def run(self) -> None:
        while not self.stopping.is_set():
            self.children = [c for c in self.children if c.is_alive()]
            self._fill(multiprocessing.get_context("spawn"))
            try:
                with self.store.session() as session:
                    queue.requeue_lapsed(session)
            except OperationalError as exc:  # the store busy past its wait: the next round tries again
                print(f"agnitra serve: lapsed leases not checked this round ({first_line(exc)})", file=sys.stderr, flush=True)
            self.stopping.wait(KEEPER_S)

    def _fill(self, context) -> None:
        while len(self.children) < self.count:
            # not a daemon: a worker starts a process for each job; it dies with the server (PDEATHSIG)
            child = context.Process(target=_worker_main, args=(self.db_url, str(self.data_dir), self.executor))
            child.start()
            self.children.append(child)

    def stop(self) -> None:
        self.stopping.set()
        for child in self.children:
            child.kill()


def run_worker_here(data_dir: Path, jobs: int | None, executor: str = "local") -> int:
    """`agnitra worker`: this process takes jobs from the store's queue (runs them here, or as Ray tasks)."""
    return run_worker(WorkerConfig(store_url(), data_dir, executor=executor), stop_after=jobs)


def _worker_main(db_url: str, data_dir: str, executor: str = "local") -> None:
    from agnitra.bench.isolated import die_with_parent

    die_with_parent()
    run_worker(WorkerConfig(db_url, Path(data_dir), executor=executor))
