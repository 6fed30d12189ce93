"""The web UI: one page (plain HTML, CSS and JavaScript shipped with the package, nothing fetched
from elsewhere) served at `/` and `/ui/...` by the API's own process. It calls the `/v1` API from
the browser with the key the user signs in with; the server holds no session of its own."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, HTTPException
from fastapi.responses import Response

router = APIRouter(include_in_schema=False)

ASSETS = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8", "icon.svg": "image/svg+xml"}
NO_CACHE = {"cache-control": "no-cache"}  # revalidated each load: the page and the API come from one release


def _asset(name: str) -> bytes:
    return (resources.files(__package__) / "static" / name).read_bytes()


@router.get("/ui/static/{name}")
def asset(name: str) -> Response:
    if name not in ASSETS:
        raise HTTPException(404, f"no asset {name}")
    return Response(_asset(name), media_type=ASSETS[name], headers=NO_CACHE)


@router.get("/")
@router.get("/ui")
@router.get("/ui/{path:path}")
def page(path: str = "") -> Response:
    """Every UI address answers with the one page; its script draws the view the address names."""
    return Response(_asset("index.html"), media_type="text/html; charset=utf-8", headers=NO_CACHE)
