"""Generic-suite test data for SSH CAs, SSH certificates and credentials, TLS certificates."""

from __future__ import annotations

from tests.api.samples import Sample

SAMPLES: dict[str, Sample] = {}
