"""``constraints.txt`` is what the README's commands install: every dependency the package
declares is pinned there, and what is installed is what it pins (an install that ignored it
would test, and ship, whatever the index had that day)."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
SEEDED = frozenset(("pip", "setuptools"))  # what ``python -m venv`` put there; setuptools is
# pinned for the compiled build's own environment, not installed by the commands


def pins() -> dict[str, str]:
    """The pinned versions whose markers hold here, by canonical name."""
    out: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec, _, marker = line.partition(";")
        if marker.strip() and not Marker(marker.strip()).evaluate():
            continue
        name, sep, version = spec.strip().partition("==")
        assert sep, f"constraints.txt pins exact versions only: {line!r}"
        out[canonicalize_name(name)] = version.strip()
    return out


def test_every_declared_dependency_is_pinned() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    pinned = pins()
    missing = sorted({canonicalize_name(Requirement(r).name) for r in declared}
                     - set(pinned))
    assert not missing, f"not in constraints.txt (run bash scripts/lock): {missing}"


def test_the_installed_versions_are_the_pinned_ones() -> None:
    wrong = []
    for name, version in pins().items():
        if name in SEEDED:
            continue
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # (pinned for a platform or an extra this install does not have)
        if installed != version:
            wrong.append(f"{name} {installed} (pinned {version})")
    assert not wrong, f"installed beside constraints.txt: {wrong}"
