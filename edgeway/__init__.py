"""Edgeway: a self-hosted ingress and tunneling platform."""

__version__ = "0.1.0"
