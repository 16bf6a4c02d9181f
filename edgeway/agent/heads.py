"""What the agent's tap reads of an HTTP/1.x head from its bytes (sans-I/O): the start line
(RFC 9112 §3, §4) and the framing headers, for the light mode (no captures: no llhttp
parser), and the Host rewrite of a request head.

Start lines as RFC 9112 has them: a request line is a method token, a target without spaces
or controls and HTTP/1.0 or 1.1; a status line is HTTP/1.0 or 1.1, a three-digit status and
a reason (which may be empty, or missing with its space). Before a line has ended,
``may_begin`` reads only its first bytes (a bounded amount per piece, however long the line).
"""

from __future__ import annotations

import re
from typing import Final, TypeVar

# (on the head decoded as latin-1, each byte one character: str's methods are compiled to
# direct calls, bytes' ``find`` and ``in`` go through argument parsing and, for ``in``, an
# attempt to read the needle as a number)
_REQUEST_LINE = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+) ([^\x00-\x20\x7f]+) HTTP/(1\.[01])\r\n")
_STATUS_LINE = re.compile(r"HTTP/(1\.[01]) ([0-9]{3})(?: ([^\x00-\x08\x0a-\x1f\x7f]*))?\r\n")
_METHOD = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]*(?: |\Z)")  # a request line's beginning
METHOD_MAX: Final = 32  # bytes of it read before its line ends (registered methods: 16 at most)
# what the tap itself reads of a head: all a side keeps when nothing is captured, read from
# the head's text rather than through a callback per header
FRAMING: Final = (("\r\ncontent-length", "Content-Length"),
                  ("\r\ntransfer-encoding", "Transfer-Encoding"),
                  ("\r\nconnection", "Connection"), ("\r\nupgrade", "Upgrade"))
BODY_FRAMING: Final = FRAMING[:2]  # a response's: its upgrade is told by its status
STATUS_LINES: Final = 256  # distinct start lines remembered, of each kind (``status_line``)
REMEMBERED_MAX: Final = 512  # characters of a start line remembered at most (longer: read anew)
_status_lines: dict[str, tuple[str, int, str] | None] = {}
_request_lines: dict[str, tuple[str, str, str] | None] = {}
T = TypeVar("T")


def text(head: bytes | bytearray) -> str:
    """A head (or its beginning) as the functions here read it: latin-1, byte for byte."""
    return head.decode("latin-1")


def _line(head: str) -> str:
    """The start line ``head`` begins with, with its CRLF, when it may be remembered."""
    end = head.find("\r\n", 0, REMEMBERED_MAX)
    return head[:end + 2] if end >= 0 else ""


def _remember(lines: dict[str, T], line: str, read: T) -> T:
    """``read``, remembered for ``line`` among the last ``STATUS_LINES`` ("": never)."""
    if line:
        if len(lines) >= STATUS_LINES:
            lines.clear()
        lines[line] = read
    return read


def request_line(head: str) -> tuple[str, str, str] | None:
    """(method, target, protocol) of the request line ``head`` begins with, else None.
    Clients repeat their requests (a poll, a health check, a page's assets): the last
    ``STATUS_LINES`` are remembered."""
    line = _line(head)
    if line in _request_lines:
        return _request_lines[line]
    found = _REQUEST_LINE.match(head)
    return _remember(_request_lines, line, None if found is None else (
        found[1], found[2], "HTTP/" + found[3]))


def status_line(head: str) -> tuple[str, int, str] | None:
    """(protocol, status, reason) of the status line ``head`` begins with, else None. A
    service answers with few distinct lines: the last ``STATUS_LINES`` are remembered."""
    line = _line(head)
    if line in _status_lines:
        return _status_lines[line]
    found = _STATUS_LINE.match(head)
    return _remember(_status_lines, line, None if found is None else (
        "HTTP/" + found[1], int(found[2]), found[3] or ""))


def may_begin(start: bytearray, request: bool) -> bool:
    """Whether ``start``, the beginning of a head whose first line has not ended, may begin
    a request line (``request``) or a status line."""
    if request:
        return _METHOD.match(start, 0, METHOD_MAX) is not None
    return b"HTTP/".startswith(bytes(start[:5]))


def framing_headers(head: str, marks: tuple[tuple[str, str], ...] = FRAMING
                    ) -> dict[str, list[str]]:
    """The framing headers of a whole head (its lines' values, in order, spaces and tabs
    around them dropped), found in its lowered text (a regular expression ignoring case
    took three times as long); ``marks``: which (``BODY_FRAMING``: a body's alone)."""
    lowered = head.lower()
    out: dict[str, list[str]] = {}
    for mark, name in marks:
        at = lowered.find(mark)
        while at >= 0:
            colon = at + len(mark)
            c = lowered[colon]
            while c == " " or c == "\t":  # (a head ends with CRLF CRLF: never past it)
                colon += 1
                c = lowered[colon]
            if c == ":":  # else a longer name
                value = head[colon + 1:lowered.find("\r\n", colon)].strip(" \t")
                values = out.get(name)
                if values is None:
                    out[name] = [value]
                else:
                    values.append(value)
            at = lowered.find(mark, colon)
    return out


def with_host(head: bytes, host: str) -> bytes:
    """A request head with its Host header(s) replaced by ``host`` (added if it had none)."""
    lines = head[:-4].split(b"\r\n")
    kept = [ln for ln in lines[1:] if ln.split(b":", 1)[0].strip().lower() != b"host"]
    return b"\r\n".join([lines[0], b"Host: " + host.encode("latin-1"), *kept]) + b"\r\n\r\n"
