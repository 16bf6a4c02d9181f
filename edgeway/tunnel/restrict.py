"""An agent bind's allow/deny CIDRs on its public connections, with the one meaning of IP
policies (``edgeway.ippolicy``)."""

from __future__ import annotations

from edgeway.ippolicy import permits
from edgeway.tunnel.binds import BindRequest


def allowed(req: BindRequest, ip: str) -> bool:
    """Whether ``ip`` may reach the tunnel bound with ``req``: when it binds no CIDRs, any."""
    return not (req.allow or req.deny) or permits(ip, req.allow, req.deny)
