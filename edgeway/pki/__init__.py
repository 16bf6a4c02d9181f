"""Certificates and keys: X.509 parsing (and, later, SSH CAs and signing)."""
