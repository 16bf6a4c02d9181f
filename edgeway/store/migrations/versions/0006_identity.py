"""application users and sessions, used SAML assertions

Revision ID: 0006_identity
Revises: 0008_vendor
Create Date: 2026-11-25 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_identity"
down_revision = "0008_vendor"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "app_users",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("doc", sa.Text(), nullable=False),
        sa.Column("k_user_key", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("k_user_key", name="uq_app_users_user_key"),
    )
    op.create_table(
        "app_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("doc", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "used_assertions",
        sa.Column("id", sa.String(length=300), nullable=False),
        sa.Column("expires", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("used_assertions", schema=None) as batch_op:
        batch_op.create_index("ix_used_assertions_expires", ["expires"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("used_assertions", schema=None) as batch_op:
        batch_op.drop_index("ix_used_assertions_expires")
    op.drop_table("used_assertions")
    op.drop_table("app_sessions")
    op.drop_table("app_users")
