"""the nodes of a cluster

Revision ID: 0009_nodes
Revises: 0005_events
Create Date: 2026-11-28 06:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_nodes"
down_revision = "0005_events"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "nodes",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("addr", sa.String(length=300), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("public_ips", sa.String(length=1000), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("lease_until", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("nodes")
