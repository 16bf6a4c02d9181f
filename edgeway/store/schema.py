"""Tables, derived from the catalog: one table per kind plus ``links``, ``settings``, ``claims``
and the ACME tables.

A kind's table holds ``id`` (primary key; ids sort by creation, so paging walks this index),
``doc`` (the stored members as JSON text), one ``k_<member>`` column per member of a unique
key, and ``token_hash`` for kinds with a shown-once secret. ``links`` records every id a
resource refers to, indexed by target, so deletes can restrict, cascade or keep.
``used_assertions`` remembers the SAML assertions the edge accepted until they expire (a
replayed one is refused on every node).
"""

from __future__ import annotations

import sqlalchemy as sa

from edgeway import catalog
from edgeway.catalog.model import Kind

metadata = sa.MetaData()

settings = sa.Table(
    "settings", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

links = sa.Table(
    "links", metadata,
    sa.Column("src_id", sa.String(64), primary_key=True),
    sa.Column("member", sa.String(64), primary_key=True),
    sa.Column("dst_id", sa.String(64), primary_key=True),
    sa.Column("src_kind", sa.String(64), nullable=False),
    sa.Index("ix_links_dst_id", "dst_id"),
)


claims = sa.Table(
    "claims", metadata,
    sa.Column("claim", sa.String(300), primary_key=True),
    sa.Column("owner_id", sa.String(64), nullable=False),
    sa.Column("owner_kind", sa.String(64), nullable=False),
    sa.Index("ix_claims_owner_id", "owner_id"),
)


used_assertions = sa.Table(
    "used_assertions", metadata,
    sa.Column("id", sa.String(300), primary_key=True),
    sa.Column("expires", sa.BigInteger, nullable=False),
    sa.Index("ix_used_assertions_expires", "expires"),
)

# ACME: the challenge answers every node serves (http-01 at /.well-known/acme-challenge/, TXT
# records of the built-in DNS), and the certificates the platform manages, one row per
# reserved domain or agent ingress, claimed by the node that issues it.
acme_challenges = sa.Table(
    "acme_challenges", metadata,
    sa.Column("key", sa.String(300), primary_key=True),  # http:<token> or dns:<name>
    sa.Column("value", sa.String(300), primary_key=True),
    sa.Column("owner_id", sa.String(64), nullable=False),
    sa.Column("expires", sa.BigInteger, nullable=False),  # unix time
    sa.Index("ix_acme_challenges_owner_id", "owner_id"),
)

managed_certificates = sa.Table(
    "managed_certificates", metadata,
    sa.Column("id", sa.String(64), primary_key=True),  # the reserved domain or agent ingress
    sa.Column("doc", sa.Text, nullable=False),
    sa.Column("due", sa.BigInteger, nullable=False),  # unix time of the next attempt
    sa.Column("claimed_by", sa.String(64), nullable=False),
    sa.Column("claimed_until", sa.BigInteger, nullable=False),
)


def key_columns(kind: Kind) -> list[str]:
    cols: list[str] = []
    for key in kind.unique:
        cols += [f"k_{m}" for m in key if f"k_{m}" not in cols]
    return cols


def _table(kind: Kind) -> sa.Table:
    cols: list[sa.Column[str] | sa.Constraint] = [
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("doc", sa.Text, nullable=False),
    ]
    cols += [sa.Column(c, sa.String(255), nullable=False) for c in key_columns(kind)]
    for key in kind.unique:
        cols.append(sa.UniqueConstraint(*[f"k_{m}" for m in key],
                                        name=f"uq_{kind.table}_{'_'.join(key)}"))
    if kind.secret:
        cols.append(sa.Column("token_hash", sa.String(64), nullable=False))
        cols.append(sa.UniqueConstraint("token_hash", name=f"uq_{kind.table}_token_hash"))
    return sa.Table(kind.table, metadata, *cols)


tables: dict[str, sa.Table] = {k.collection: _table(k) for k in catalog.ALL}
