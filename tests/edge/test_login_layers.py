"""The login package's imports run one way: each module imports only those below it (type
checking included), and the edge underneath (hooks, pages, h1) imports none of it."""

from __future__ import annotations

import re
from pathlib import Path

import edgeway

LOGIN = Path(edgeway.__file__).parent / "edge" / "login"
ORDER = ["base", "sessions", "providers", "flow", "code_flow", "oidc", "oauth", "saml", "gate"]
BELOW = ["hooks", "pages", "h1", "hosts"]  # (edge modules the logins stand on)
IMPORT = re.compile(r"from edgeway\.edge\.login(?:\.(\w+))? import (\w+)")


def test_each_login_module_imports_only_those_below_it() -> None:
    assert sorted(p.stem for p in LOGIN.glob("*.py") if p.stem != "__init__") == sorted(ORDER)
    for name in ORDER:
        for m in IMPORT.finditer((LOGIN / f"{name}.py").read_text()):
            dep = m.group(1) or m.group(2)
            assert dep in ORDER and ORDER.index(dep) < ORDER.index(name), (name, dep)


def test_the_edge_underneath_imports_no_login() -> None:
    for name in BELOW:
        assert "edgeway.edge.login" not in (LOGIN.parent / f"{name}.py").read_text(), name
