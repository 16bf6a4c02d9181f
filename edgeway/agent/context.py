"""Where a config value came from, for error messages: ``ConfigError`` (an unusable config)
and ``Context``, which turns a value check's ``Invalid`` into an error naming the file that
set the key last, the dotted key path and the rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from edgeway.agent.configcheck import Invalid

T = TypeVar("T")


class ConfigError(Exception):
    """An unusable config; str(exc) names the file, the key path and the rule."""


class Context:
    def __init__(self, origins: dict[str, str], files: tuple[str, ...]) -> None:
        self.origins, self.files = origins, files

    def file(self, path: tuple[str, ...]) -> str:
        for i in range(len(path), 0, -1):
            if (name := self.origins.get(".".join(path[:i]))) is not None:
                return name
        return ", ".join(self.files)

    def error(self, path: tuple[str, ...], rule: str) -> ConfigError:
        return ConfigError(f"{self.file(path)}: {'.'.join(path)}: {rule}")

    def get(self, doc: dict[str, Any], path: tuple[str, ...], parse: Callable[[Any], T],
            default: T) -> T:
        if path[-1] not in doc:
            return default
        try:
            return parse(doc[path[-1]])
        except Invalid as exc:
            raise self.error(path, str(exc)) from None
