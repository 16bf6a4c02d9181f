"""Domain names of a given length, for the limits of DNS names."""

from __future__ import annotations


def long_name(length: int, suffix: str) -> str:
    """A valid domain name of ``length`` characters ending in ``.suffix``."""
    labels, left = [], length - len(suffix)  # (each label takes its size and a dot)
    while left > 0:
        size = min(63, left - 1)
        if left - size - 1 == 1:  # (no room for a last label: make this one shorter)
            size -= 1
        labels.append("a" * size)
        left -= size + 1
    return ".".join([*labels, suffix])
