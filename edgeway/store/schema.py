"""Tables, derived from the catalog: one table per kind plus ``links``, ``settings``, ``claims``,
the ACME tables and the event tables (``event_outbox``, ``event_delivery``,
``event_dead_letters``, see ``store/outbox.py``) and ``dashboard_sessions``.

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
from edgeway.store.keys import key_columns

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

# the nodes of a cluster sharing this database (``edgeway.nodes``): where the others reach
# each, its region and public addresses, and until when it counts as alive
nodes = sa.Table(
    "nodes", metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("addr", sa.String(300), nullable=False),
    sa.Column("region", sa.String(64), nullable=False),
    sa.Column("public_ips", sa.String(1000), nullable=False),  # comma-separated
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("lease_until", sa.Float, nullable=False),
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

# events waiting for delivery, one row per (event, destination), in order of ``seq``
event_outbox = sa.Table(
    "event_outbox", metadata,
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
              autoincrement=True),
    sa.Column("destination_id", sa.String(64), nullable=False),
    sa.Column("event_id", sa.String(64), nullable=False),
    sa.Column("event_type", sa.String(64), nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Index("ix_event_outbox_destination_seq", "destination_id", "seq"),
)

# per destination: which node delivers it (a lease), its back-off and what happened last
event_delivery = sa.Table(
    "event_delivery", metadata,
    sa.Column("destination_id", sa.String(64), primary_key=True),
    sa.Column("owner", sa.String(64), nullable=False),
    sa.Column("lease_until", sa.Float, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_at", sa.Float, nullable=False),
    sa.Column("last_error", sa.Text, nullable=False),
    sa.Column("last_error_at", sa.String(32), nullable=False),
    sa.Column("last_success_at", sa.String(32), nullable=False),
    sa.Column("delivered", sa.BigInteger, nullable=False),
    sa.Column("dropped", sa.BigInteger, nullable=False),
)

# events that failed every attempt, kept until sent again
event_dead_letters = sa.Table(
    "event_dead_letters", metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("destination_id", sa.String(64), nullable=False),
    sa.Column("event_id", sa.String(64), nullable=False),
    sa.Column("event_type", sa.String(64), nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("failed_at", sa.String(32), nullable=False),
    sa.Index("ix_event_dead_letters_destination_id", "destination_id", "id"),
)


# the dashboard's browser sessions (``store/dashboard.py``): ``id`` is the SHA-256 of the
# cookie's secret (the cookie itself is stored nowhere), ``ref`` the id shown and revoked by
dashboard_sessions = sa.Table(
    "dashboard_sessions", metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("ref", sa.String(64), nullable=False),
    sa.Column("key_id", sa.String(64), nullable=False),
    sa.Column("key_hash", sa.String(64), nullable=False),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("seen", sa.Float, nullable=False),
    sa.Column("client", sa.String(64), nullable=False),
    sa.Column("user_agent", sa.String(300), nullable=False),
    sa.UniqueConstraint("ref", name="uq_dashboard_sessions_ref"),
    sa.Index("ix_dashboard_sessions_key_id", "key_id"),
)

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
