"""The last requests each endpoint served on this node, as the edge saw them, for the
dashboard's Traffic page: kept in memory without a subscription (traffic events go to
destinations only when one is subscribed), bounded (``PER_ENDPOINT`` requests of each of the
``ENDPOINTS`` endpoints served last), and cheap on the request path (one tuple appended to a
deque). A node keeps its own: in a cluster each node shows the requests it served."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

PER_ENDPOINT = 50
ENDPOINTS = 1000
TARGET_MAX = 256  # characters of a request target kept


@dataclass(frozen=True, slots=True)
class Served:
    at: float  # seconds since the epoch, when it was answered
    client: str
    method: str
    target: str
    status: int
    ms: float  # from the request's head to its answer's end
    scheme: str
    route: str  # an HTTPS edge's route id ("" for an agent's endpoint)


class RecentTraffic:
    def __init__(self, per_endpoint: int = PER_ENDPOINT, endpoints: int = ENDPOINTS) -> None:
        self.per_endpoint, self.max_endpoints = per_endpoint, endpoints
        # endpoint key (an edge's id, or an agent tunnel's) -> its requests, oldest first, as
        # the edge gave them (``served``'s arguments: made into ``Served`` only when read);
        # the endpoint served last at the end
        self._by: OrderedDict[str, deque[tuple[Any, ...]]] = OrderedDict()
        self.labels: dict[str, str] = {}  # key -> what it is (a URL, a host name)

    def served(self, key: str, method: bytes, target: bytes, status: int, ip: str, port: int,
               took: float, scheme: str, route: str, label: str) -> None:
        """One request the edge answered for the endpoint ``key`` (``label``: what it is)."""
        row = (time.time(), ip, port, method, target, status, took, scheme, route)
        by = self._by
        rows = by.get(key)
        if rows is None:
            if len(by) >= self.max_endpoints:
                gone, _ = by.popitem(last=False)
                self.labels.pop(gone, None)
            rows = by[key] = deque(maxlen=self.per_endpoint)
            self.labels[key] = label
        else:
            by.move_to_end(key)
        rows.append(row)

    def endpoints(self) -> list[tuple[str, str, list[Served]]]:
        """Each endpoint (key, label, its requests newest first), the one served last first."""
        return [(key, self.labels.get(key, ""), [_served(r) for r in reversed(rows)])
                for key, rows in reversed(self._by.items())]


def _served(row: tuple[Any, ...]) -> Served:
    at, ip, port, method, target, status, took, scheme, route = row
    return Served(at, f"{ip}:{port}", method.decode("latin-1"),
                  target[:TARGET_MAX].decode("latin-1"), status, round(took * 1000, 2),
                  scheme, route)
