"""The traffic policy's ``http-request`` action (``on_http_request``): an HTTP request to an
internal endpoint (an agent's tunnel bound to a ``.internal`` name), whose answer the later
rules read as ``actions.ngrok.http_request.*`` (``res.status_code``, ``res.header``,
``res.body``, ``req``, ``attempts``, ``error``).

As ngrok does by default, it reaches internal endpoints only: never the internet or this
machine's network, so a policy cannot be turned against what the edge can reach. It goes
straight to the endpoint's agent; an internal endpoint with modules or a traffic policy of its
own is not called (those would not run: a ``forward-internal`` does run them), an error says
so. Bounded: ``timeout`` (1 s to 30 s, default 3 s) for the whole, redirects and retries
included; redirects followed to internal endpoints only (``max_redirects``, default 10, at
most 100); the response body read to 1 MiB; up to 3 retries while ``retry_condition`` (CEL
over ``attempts`` and ``last_attempt.req|res|error``, evaluated after every attempt) holds.
``url``, ``headers``, ``query_params`` and ``body`` take ``${...}`` interpolations.
``on_error``: ``continue`` (default; the error is in ``actions.ngrok.http_request.error``) or
``halt``: 502 ``ERR_EDGEWAY_4022``.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urljoin, urlsplit

from edgeway.celpkg import cel
from edgeway.edge import h1
from edgeway.edge.h1 import End, Response
from edgeway.edge.h1_response import ResponseParser
from edgeway.edge.hooks import Exchange, Hook, Verdict
from edgeway.edge.modules.policy_values import Unsupported, interpolate, result, seconds
from edgeway.edge.pages import Fixed, page

METHODS = ("GET", "PUT", "POST", "PATCH", "DELETE", "OPTIONS")
MAX_BODY = 1 << 20  # response bytes read at most
MAX_HEADERS, MAX_QUERY = 10, 32
MAX_RETRIES = 3
_HOST = re.compile(r"([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+internal")
_SAFE = "/%:@!$&'()*+,;=-._~"  # (what stays as it is in a request target)
_UNSAFE = re.compile(r"[\r\n\0]")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a header name (RFC 9110 token)


class Failed(Exception):
    """An attempt that got no response: (code, message) for ``error``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class Call(Hook):
    name = "http-request"
    url: str
    method: str
    query: tuple[tuple[str, str], ...]
    headers: tuple[tuple[str, str], ...]
    body: str
    max_redirects: int
    timeout: float
    retry: Any  # a compiled CEL program, or None
    halt: bool

    async def request(self, x: Exchange) -> Verdict:
        return await self.call(x, x.env if x.env is not None else {})

    async def call(self, x: Exchange, env: dict[str, Any]) -> Fixed | None:
        """Make the call with the variables ``env`` (a request's, or in on_http_response the
        response's too), its result there; a 502 page when it failed and halts."""
        url = interpolate(self.url, env)
        if self.query:
            url += ("&" if "?" in url else "?") + urlencode(
                [(k, interpolate(v, env)) for k, v in self.query])
        headers = [(k, interpolate(v, env)) for k, v in self.headers]
        body = interpolate(self.body, env) if self.body else ""
        req = {"method": self.method, "url": url, "body": body,
               "header": {k.lower(): [v] for k, v in headers}}
        attempts: list[dict[str, Any]] = []
        res: dict[str, Any] | None = None
        error: Failed | None = None
        try:
            async with asyncio.timeout(self.timeout):
                while True:
                    res, error = None, None
                    try:
                        res = await self._follow(x, url, headers, body)
                    except Failed as exc:
                        error = exc
                    attempts.append(_attempt(res))
                    if len(attempts) > MAX_RETRIES or not self._again(attempts, req, res,
                                                                      error):
                        break
        except TimeoutError:
            error = Failed("timeout", f"no answer within {self.timeout:g} s")
        values: dict[str, Any] = {"req": req, "attempts": attempts}
        if res is not None:
            values["res"] = res
        if error is not None:
            values["error"] = {"code": error.code, "message": error.message}
        result(env, "http_request", values)
        if error is not None and self.halt:
            return page(502, "Policy request failed", f"The traffic policy's HTTP request to "
                        f"{url} failed: {error.message}.", 4022)
        return None

    def _again(self, attempts: list[dict[str, Any]], req: dict[str, Any],
               res: dict[str, Any] | None, error: Failed | None) -> bool:
        if self.retry is None:
            return False
        last = {"req": req, "res": res or {},
                "error": error.message if error is not None else ""}
        try:
            return self.retry.execute({"attempts": len(attempts), "last_attempt": last}) is True
        except Exception:
            return False

    async def _follow(self, x: Exchange, url: str, headers: list[tuple[str, str]],
                      body: str) -> dict[str, Any]:
        """One attempt: the request, and the redirects it is answered with."""
        method, left = self.method, self.max_redirects
        while True:
            res = await _send(x, url, method, headers, body)
            location = res["header"].get("location", [""])[0]
            if res["status_code"] not in (301, 302, 303, 307, 308) or not location:
                return res
            if left == 0:
                return res  # (as a client does: the redirect is the answer)
            left -= 1
            url = urljoin(url, location)
            if res["status_code"] in (301, 302, 303) and method != "GET":
                method, body = "GET", ""


def _attempt(res: dict[str, Any] | None) -> dict[str, Any]:
    if res is None:
        return {"resolved_ip": "", "response_header": {}, "response_status_code": 0,
                "response_time_ms": "0"}
    return {"resolved_ip": res["resolved_ip"], "response_header": res["header"],
            "response_status_code": res["status_code"], "response_time_ms": res["time_ms"]}


def internal(url: str) -> tuple[str, str, str]:
    """(scheme, host, target) of an internal endpoint's URL, the target percent-encoded (an
    interpolated value cannot break the request line); ``Failed`` otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        port, parts = -1, urlsplit("")
    host = (parts.hostname or "").rstrip(".")
    if parts.scheme not in ("http", "https") or not _HOST.fullmatch(host) or port is not None:
        raise Failed("not_internal", f"{url!r} is not an internal endpoint's URL (http:// or "
                     "https:// and a name ending in .internal, no port): http-request reaches "
                     "internal endpoints only")
    target = quote(parts.path or "/", safe=_SAFE) + \
        (f"?{quote(parts.query, safe=_SAFE + '?')}" if parts.query else "")
    return parts.scheme, host, target


async def _send(x: Exchange, url: str, method: str, headers: list[tuple[str, str]],
                body: str) -> dict[str, Any]:
    scheme, host, target = internal(url)
    tunnel = x.services.internal(host, scheme)
    if tunnel is None:
        raise Failed("offline", f"no agent serves the internal endpoint {scheme}://{host}")
    if x.services.guarded(tunnel):
        raise Failed("guarded", f"the internal endpoint {scheme}://{host} has modules or a "
                     "traffic policy of its own, which http-request does not run (use "
                     "forward-internal)")
    data = body.encode()
    if any(_UNSAFE.search(v) for _, v in headers):
        raise Failed("bad_header", "a header value holds a line break or NUL")
    head = [(b"Host", host.encode()), *((k.encode(), v.encode()) for k, v in headers
                                        if k.lower() not in ("host", "content-length",
                                                             "transfer-encoding",
                                                             "connection")),
            (b"Content-Length", str(len(data)).encode()), (b"Connection", b"close")]
    started = time.monotonic()
    try:
        pipe = await tunnel.open(f"{x.ip}:{x.port}", tunnel.proto)
    except Exception as exc:  # (the agent went away, or has no stream free)
        raise Failed("offline", f"the internal endpoint's agent: {exc}") from None
    try:
        await pipe.write(h1.head(b"%b %b HTTP/1.1\r\n" % (method.encode(), target.encode()),
                                 head) + data)
        return await _response(pipe, method, started)
    except Failed:
        raise
    except Exception as exc:
        raise Failed("upstream", f"the internal endpoint's answer: {exc}") from None
    finally:
        pipe.close()


async def _response(pipe: Any, method: str, started: float) -> dict[str, Any]:
    parser = ResponseParser()
    parser.expect(method == "HEAD")
    head: Response | None = None
    body = bytearray()
    while True:
        event = parser.next_event()
        if event is None:
            data = await pipe.read()
            if data:
                parser.feed(data)
            else:
                parser.eof()
            continue
        if isinstance(event, Response) and event.status >= 200:
            head = event
        elif isinstance(event, bytes):
            body += event
            if len(body) > MAX_BODY:
                raise Failed("too_large", f"the response body is over {MAX_BODY} bytes")
        elif isinstance(event, End):
            break
    if head is None:
        raise Failed("upstream", "the internal endpoint sent no response")
    header: dict[str, list[str]] = {}
    for k, v in head.headers:
        header.setdefault(k.decode("latin-1").lower(), []).append(v.decode("latin-1"))
    return {"status_code": head.status, "header": header,
            "body": body.decode("utf-8", "replace"), "resolved_ip": "",
            "time_ms": f"{(time.monotonic() - started) * 1000:.0f}"}


def _pairs(value: Any, what: str, limit: int) -> tuple[tuple[str, str], ...]:
    if isinstance(value, dict):
        items = [(str(k), str(v)) for k, v in value.items()]
    elif isinstance(value, list) and all(isinstance(i, dict) and set(i) == {"key", "value"}
                                         for i in value):
        items = [(str(i["key"]), str(i["value"])) for i in value]
    else:
        raise Unsupported(f"http-request {what}: " + ("a map of names to values"
                                                       if what == "headers" else
                                                       "a list of {key, value} objects"))
    if len(items) > limit:
        raise Unsupported(f"http-request {what}: at most {limit}")
    if what == "headers" and (bad := next((k for k, _ in items if not _TOKEN.fullmatch(k)),
                                          None)) is not None:
        raise Unsupported(f"http-request headers: {bad!r} is not a header name")
    return tuple(items)


def compile(cfg: dict[str, Any]) -> Call:
    """The action; ``Unsupported`` naming what it cannot honour."""
    url = str(cfg.get("url") or "")
    if not url:
        raise Unsupported("http-request without a url")
    if "${" not in url:
        try:
            internal(url)
        except Failed as exc:
            raise Unsupported(exc.message) from None
    method = str(cfg.get("method", "GET")).upper()
    if method not in METHODS:
        raise Unsupported(f"http-request method {method!r} ({', '.join(METHODS)})")
    redirects = cfg.get("max_redirects", 10)
    if not isinstance(redirects, int) or isinstance(redirects, bool) \
            or not 0 <= redirects <= 100:
        raise Unsupported(f"http-request max_redirects {redirects!r} (0 to 100)")
    timeout = seconds(str(cfg.get("timeout", "3s")))
    if not 1 <= timeout <= 30:
        raise Unsupported(f"http-request timeout {cfg.get('timeout')!r} (1s to 30s)")
    retry = None
    if (condition := cfg.get("retry_condition")) not in (None, "", "false", False):
        try:
            retry = cel.compile(str(condition))
        except Exception as exc:
            raise Unsupported(f"http-request retry_condition: {exc}") from None
    on_error = cfg.get("on_error", "continue")
    if on_error not in ("halt", "continue"):
        raise Unsupported(f"http-request on_error {on_error!r} (halt or continue)")
    return Call(url, method, _pairs(cfg.get("query_params") or [], "query_params", MAX_QUERY),
                _pairs(cfg.get("headers") or {}, "headers", MAX_HEADERS),
                str(cfg.get("body") or ""), redirects, timeout, retry, on_error == "halt")
