"""The response_headers module: the same shape as request_headers, applied to responses."""

from __future__ import annotations

from typing import Any

from edgeway.edge.modules import request_headers
from edgeway.edge.modules.request_headers import HeaderChange


def compile(module: dict[str, Any]) -> HeaderChange:
    return request_headers.compile(module)
