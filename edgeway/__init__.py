"""Edgeway: a self-hosted ingress and tunneling platform."""

from edgeway import native

__version__ = "0.1.0"

native.choose()  # compiled protocol cores, or their sources (before any is imported)
