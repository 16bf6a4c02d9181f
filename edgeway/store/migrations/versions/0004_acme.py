"""acme challenges and managed certificates

Revision ID: 0004_acme
Revises: 0008_vendor
Create Date: 2026-11-26 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_acme"
down_revision = "0006_identity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "acme_challenges",
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("value", sa.String(length=300), nullable=False),
        sa.Column("owner_id", sa.String(length=64), nullable=False),
        sa.Column("expires", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key", "value"),
    )
    with op.batch_alter_table("acme_challenges", schema=None) as batch_op:
        batch_op.create_index("ix_acme_challenges_owner_id", ["owner_id"], unique=False)
    op.create_table(
        "managed_certificates",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("doc", sa.Text(), nullable=False),
        sa.Column("due", sa.BigInteger(), nullable=False),
        sa.Column("claimed_by", sa.String(length=64), nullable=False),
        sa.Column("claimed_until", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("managed_certificates")
    with op.batch_alter_table("acme_challenges", schema=None) as batch_op:
        batch_op.drop_index("ix_acme_challenges_owner_id")
    op.drop_table("acme_challenges")
