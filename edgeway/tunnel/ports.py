"""The ports of TCP tunnels: which are free, which live tunnels use, which a dropped session's
tunnels still hold for their agent's reconnect, and which another process turned out to hold.
Pure bookkeeping, O(1) per allocation however many tunnels are bound; the server does the
listening.

A tunnel that ends cleanly (its agent unbound it or closed its session with a GOAWAY, or the
server stopped it) returns its port at once. One whose session dropped holds its port, for its
tunnel id only, for ``grace`` seconds: the agent reconnects and re-binds the same address. A
port the operating system refused (another process listens there) is set aside for ``grace``
seconds too, so that allocations do not keep trying it.

Ports of reserved addresses are never handed out by ``take_any``; a bind asking for one by
name takes it. A dropped session's hold of one is its owner's (the credential that bound it):
the owner's re-bind takes it back under any tunnel id (a restarted agent has new ones),
another credential's waits for the grace period to end.
"""

from __future__ import annotations

from collections import OrderedDict


class PortPool:
    def __init__(self, low: int, high: int, grace: float) -> None:
        self.low, self.high, self.grace = low, high, grace
        self._free: set[int] = set(range(low, high + 1))
        self._used: dict[int, str] = {}  # port -> the tunnel id using it
        # tunnel id -> (port, until) and port -> until; both in expiry order (one grace)
        self._held: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._holder: dict[int, str] = {}  # held port -> its tunnel id
        self._owner: dict[str, str] = {}  # held tunnel id -> the credential that bound it
        self._blocked: OrderedDict[int, float] = OrderedDict()
        self._reserved: set[int] = set()

    def __contains__(self, port: int) -> bool:
        return self.low <= port <= self.high

    @property
    def free(self) -> int:
        return len(self._free)

    def _expire(self, now: float) -> None:
        while self._held:
            tunnel_id, (port, until) = next(iter(self._held.items()))
            if until > now:
                break
            self._unhold(tunnel_id)
            self._return(port)
        while self._blocked:
            port, until = next(iter(self._blocked.items()))
            if until > now:
                break
            del self._blocked[port]
            if port not in self._used:
                self._return(port)

    def _unhold(self, tunnel_id: str) -> None:
        port, _until = self._held.pop(tunnel_id)
        del self._holder[port]
        self._owner.pop(tunnel_id, None)

    def _return(self, port: int) -> None:
        if port in self and port not in self._reserved:
            self._free.add(port)

    def reserve(self, ports: set[int]) -> None:
        """The ports of reserved addresses now (a port no longer reserved returns to the
        pool once nothing uses or holds it)."""
        for port in self._reserved - ports:
            self._reserved.discard(port)
            if port not in self._used and port not in self._holder \
                    and port not in self._blocked:
                self._return(port)
        self._free -= ports
        self._reserved = set(ports)

    def held(self, tunnel_id: str, now: float) -> int | None:
        """The port a dropped tunnel of this id still holds, if any."""
        self._expire(now)
        entry = self._held.get(tunnel_id)
        return entry[0] if entry else None

    def take(self, tunnel_id: str, port: int, now: float, owner: str = "") -> bool:
        """Claim ``port`` (in the range or not) for ``tunnel_id`` of the credential
        ``owner``: False when another tunnel uses or holds it. The tunnel's own held port is
        taken back, and so is a reserved one a dropped session of the same owner holds."""
        self._expire(now)
        entry = self._held.get(tunnel_id)
        if entry is not None and entry[0] == port:
            self._unhold(tunnel_id)
        elif port in self._holder and port in self._reserved and port not in self._used \
                and owner and self._owner.get(self._holder[port]) == owner:
            self._unhold(self._holder[port])
        elif port in self._used or port in self._holder:
            return False
        self._blocked.pop(port, None)  # asked for by name: tried again
        self._free.discard(port)
        self._used[port] = tunnel_id
        return True

    def holding(self, port: int) -> bool:
        """Whether a dropped session's tunnel holds ``port`` for its agent's reconnect."""
        return port in self._holder

    def take_any(self, tunnel_id: str, preferred: int, allowed: set[int] | None,
                 now: float) -> int | None:
        """Claim a free port of the range for ``tunnel_id``: ``preferred`` when free, else
        any (among ``allowed`` when given); None when none is."""
        self._expire(now)
        if preferred in self._free and (allowed is None or preferred in allowed):
            port: int | None = preferred
        elif allowed is None:
            port = self._free.pop() if self._free else None  # (pop: amortized O(1))
        else:
            port = next((p for p in sorted(allowed) if p in self._free), None)
        if port is not None:
            self._free.discard(port)
            self._used[port] = tunnel_id
        return port

    def release(self, tunnel_id: str, port: int) -> None:
        """The tunnel ended cleanly: its port is free at once."""
        if self._used.get(port) == tunnel_id:
            del self._used[port]
            self._return(port)
        entry = self._held.get(tunnel_id)
        if entry is not None and entry[0] == port:
            self._unhold(tunnel_id)
            self._return(port)

    def hold(self, tunnel_id: str, port: int, now: float, owner: str = "") -> None:
        """The tunnel's session dropped: keep its port for its id (and, a reserved one, for
        its credential ``owner``) for ``grace`` seconds."""
        if self._used.get(port) != tunnel_id:
            return
        del self._used[port]
        if tunnel_id in self._held:
            self._return(self._held[tunnel_id][0])
            self._unhold(tunnel_id)
        self._held[tunnel_id] = (port, now + self.grace)
        self._holder[port] = tunnel_id
        if owner:
            self._owner[tunnel_id] = owner

    def block(self, tunnel_id: str, port: int, now: float) -> None:
        """The system refused to listen on ``port`` (taken for ``tunnel_id``): set it aside."""
        if self._used.get(port) == tunnel_id:
            del self._used[port]
        self._blocked.pop(port, None)
        self._blocked[port] = now + self.grace
