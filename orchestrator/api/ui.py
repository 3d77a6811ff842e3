"""The approvals page at ``/ui``, and its profiles view: static files shipped in the package
(``orchestrator/api/ui/``), no build step, nothing from anywhere else. The page itself is public (the auth
middleware lets ``/ui`` through); every data call it makes carries the approver's token.

Served with a strict Content-Security-Policy: scripts, styles, images and connections from this
origin only, no inline script or style, no framing; Trusted Types are required, so even a slip to
``innerHTML`` in the page's script would throw instead of parsing data as HTML."""

from __future__ import annotations

from importlib import resources

from aiohttp import web

CSP = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "img-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "require-trusted-types-for 'script'",
        "trusted-types 'none'",
    )
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",  # for browsers that predate frame-ancestors
    "Cross-Origin-Opener-Policy": "same-origin",
}
# every file the page is made of, and its media type (nothing else under /ui is answered); vendor/: the profiles
# view's charting library, as published on npm (vendor/README.md: its version and sha256 sums)
FILES = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "profiles.js": "text/javascript",
    "style.css": "text/css",
    "icon.svg": "image/svg+xml",
    "vendor/uPlot.iife.min.js": "text/javascript",
    "vendor/uPlot.min.css": "text/css",
}


def _load() -> dict[str, bytes]:
    folder = resources.files(__package__ or "orchestrator.api").joinpath("ui")
    return {name: folder.joinpath(*name.split("/")).read_bytes() for name in FILES}


def add_ui_routes(app: web.Application) -> None:
    """``GET /ui`` (and ``/ui/``) the page, ``GET /ui/<file>`` its scripts, styles and icon (``<file>`` one of
    FILES exactly: a path is looked up, never joined)."""
    files = _load()

    def answer(name: str) -> web.Response:
        return web.Response(body=files[name], content_type=FILES[name], charset="utf-8", headers=HEADERS)

    async def page(request: web.Request) -> web.Response:
        return answer("index.html")

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in files:
            raise web.HTTPNotFound(reason="no such file")
        return answer(name)

    app.router.add_get("/ui", page)
    app.router.add_get("/ui/", page)
    app.router.add_get("/ui/{name:.+}", asset)
