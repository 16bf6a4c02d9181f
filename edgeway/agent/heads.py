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

_REQUEST_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+) ([^\x00-\x20\x7f]+) HTTP/(1\.[01])\r\n")
_STATUS_LINE = re.compile(rb"HTTP/(1\.[01]) ([0-9]{3})(?: ([^\x00-\x08\x0a-\x1f\x7f]*))?\r\n")
_METHOD = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]*(?: |\Z)")  # a request line's beginning
METHOD_MAX = 32  # bytes of it read before its line ends (registered methods: 16 at most)
# what the tap itself reads of a head: all a side keeps when nothing is captured, read from
# the head's bytes rather than through a callback per header
FRAMING = ((b"\r\ncontent-length", "Content-Length"),
           (b"\r\ntransfer-encoding", "Transfer-Encoding"),
           (b"\r\nconnection", "Connection"), (b"\r\nupgrade", "Upgrade"))
BODY_FRAMING = FRAMING[:2]  # a response's: its upgrade is told by its status
STATUS_LINES = 256  # distinct status lines remembered (``status_line``)
_status_lines: dict[bytes, tuple[str, int, str] | None] = {}


def request_line(head: bytes | bytearray) -> tuple[str, str, str] | None:
    """(method, target, protocol) of the request line ``head`` begins with, else None."""
    found = _REQUEST_LINE.match(head)
    if found is None:
        return None
    return (found[1].decode("latin-1"), found[2].decode("latin-1"),
            "HTTP/" + found[3].decode("latin-1"))


def status_line(head: bytes | bytearray) -> tuple[str, int, str] | None:
    """(protocol, status, reason) of the status line ``head`` begins with, else None. A
    service answers with few distinct lines: the last ``STATUS_LINES`` are remembered."""
    end = head.find(b"\r\n")
    line = bytes(head[:end + 2]) if end >= 0 else b""
    try:
        return _status_lines[line]
    except KeyError:
        pass
    found = _STATUS_LINE.match(head)
    read = None if found is None else (
        "HTTP/" + found[1].decode("latin-1"), int(found[2]), (found[3] or b"").decode("latin-1"))
    if line:
        if len(_status_lines) >= STATUS_LINES:
            _status_lines.clear()
        _status_lines[line] = read
    return read


def may_begin(start: bytearray, request: bool) -> bool:
    """Whether ``start``, the beginning of a head whose first line has not ended, may begin
    a request line (``request``) or a status line."""
    if request:
        return _METHOD.match(start, 0, METHOD_MAX) is not None
    return b"HTTP/".startswith(bytes(start[:5]))


def framing_headers(head: bytes, marks: tuple[tuple[bytes, str], ...] = FRAMING
                    ) -> dict[str, list[str]]:
    """The framing headers of a whole head (its lines' values, in order, spaces and tabs
    around them dropped), found in its lowered bytes (a regular expression ignoring case
    took three times as long); ``marks``: which (``BODY_FRAMING``: a body's alone)."""
    lowered = head.lower()
    out: dict[str, list[str]] = {}
    for mark, name in marks:
        at = lowered.find(mark)
        while at >= 0:
            colon = at + len(mark)
            while lowered[colon] in (32, 9):  # (a head ends with CRLF CRLF: never past it)
                colon += 1
            if lowered[colon] == 58:  # ":", else a longer name
                value = head[colon + 1:head.index(b"\r\n", colon)].strip(b" \t")
                out.setdefault(name, []).append(value.decode("latin-1"))
            at = lowered.find(mark, colon)
    return out


def with_host(head: bytes, host: str) -> bytes:
    """A request head with its Host header(s) replaced by ``host`` (added if it had none)."""
    lines = head[:-4].split(b"\r\n")
    kept = [ln for ln in lines[1:] if ln.split(b":", 1)[0].strip().lower() != b"host"]
    return b"\r\n".join([lines[0], b"Host: " + host.encode("latin-1"), *kept]) + b"\r\n\r\n"
