"""Generic-suite test data for edges, HTTPS routes and backends."""

from __future__ import annotations

from tests.api.samples import Sample

SAMPLES: dict[str, Sample] = {}
