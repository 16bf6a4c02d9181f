"""The error pages Edgeway answers with by itself, wherever it answers: the edge, and the agent
when its local service cannot be reached. HTML, with the stable code in an
``Edgeway-Error-Code`` header; ``Fixed`` is any fixed answer (status, headers, body)."""

from __future__ import annotations

import html
from dataclasses import dataclass
from http import HTTPStatus


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


def http1(answer: Fixed) -> bytes:
    """``answer`` as a whole HTTP/1.1 response that ends its connection."""
    try:
        reason = HTTPStatus(answer.status).phrase
    except ValueError:
        reason = ""
    head = [f"HTTP/1.1 {answer.status} {reason}".rstrip(),
            *(f"{name}: {value}" for name, value in answer.headers),
            f"Content-Length: {len(answer.body)}", "Connection: close"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + answer.body
