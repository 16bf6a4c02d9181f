"""Answers the edge gives by itself: fixed responses (http_response backends) and the error
pages, HTML with the stable code in an ``Edgeway-Error-Code`` header."""

from __future__ import annotations

import html
from dataclasses import dataclass


@dataclass(frozen=True)
class Fixed:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


def page(status: int, title: str, detail: str, code: int,
         extra: tuple[tuple[str, str], ...] = ()) -> Fixed:
    body = (f"<!doctype html><html><head><title>{status} {html.escape(title)}</title></head>"
            f"<body><h1>{html.escape(title)}</h1><p>{html.escape(detail)}</p>"
            f"<p><code>ERR_EDGEWAY_{code}</code></p></body></html>\n").encode()
    return Fixed(status, (("Content-Type", "text/html; charset=utf-8"),
                          ("Edgeway-Error-Code", f"ERR_EDGEWAY_{code}"), *extra), body)
