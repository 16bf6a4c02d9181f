"""events: the outbox, per-destination delivery state, dead letters

Revision ID: 0005_events
Revises: 0003
Create Date: 2026-11-24 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_events"
down_revision = "0004_acme"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "event_outbox",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("destination_id", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.String(length=64), nullable=False),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
    )
    with op.batch_alter_table("event_outbox", schema=None) as batch_op:
        batch_op.create_index("ix_event_outbox_destination_seq", ["destination_id", "seq"],
                              unique=False)
    op.create_table(
        "event_delivery",
        sa.Column("destination_id", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("lease_until", sa.Float(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_at", sa.Float(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("last_error_at", sa.String(length=32), nullable=False),
        sa.Column("last_success_at", sa.String(length=32), nullable=False),
        sa.Column("delivered", sa.BigInteger(), nullable=False),
        sa.Column("dropped", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("destination_id"),
    )
    op.create_table(
        "event_dead_letters",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("destination_id", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.String(length=64), nullable=False),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("failed_at", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("event_dead_letters", schema=None) as batch_op:
        batch_op.create_index("ix_event_dead_letters_destination_id", ["destination_id", "id"],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table("event_dead_letters", schema=None) as batch_op:
        batch_op.drop_index("ix_event_dead_letters_destination_id")
    op.drop_table("event_dead_letters")
    op.drop_table("event_delivery")
    with op.batch_alter_table("event_outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_event_outbox_destination_seq")
    op.drop_table("event_outbox")
