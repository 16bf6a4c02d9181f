"""The dashboard's own style sheet and script, and the vendored htmx (``VENDORED.md``), served
from the package (nothing is loaded from anywhere else), read once."""

from __future__ import annotations

from functools import cache
from importlib import resources

from starlette.responses import Response

from edgeway.dashboard.web import Ctx, Handler, Refusal

TYPES = {"css": "text/css; charset=utf-8", "js": "text/javascript; charset=utf-8",
         "svg": "image/svg+xml"}
FILES = ("dashboard.css", "dashboard.js", "icon.svg", "htmx.min.js")  # (VENDORED.md)


@cache
def _read(name: str) -> bytes:
    return resources.files("edgeway.dashboard").joinpath("static", name).read_bytes()


async def static(ctx: Ctx) -> Response:
    name = ctx.params["name"]
    if name not in FILES:
        raise Refusal(404, "Not found", f"The dashboard has no file {name}.")
    return Response(_read(name), 200, media_type=TYPES[name.rsplit(".", 1)[1]],
                    headers={"cache-control": "public, max-age=300"})


def routes() -> list[tuple[str, str, Handler, bool]]:
    return [("/static/{name}", "GET", static, True)]
