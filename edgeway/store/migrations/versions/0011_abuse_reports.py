"""abuse reports

Revision ID: 0011_abuse_reports
Revises: 0010_dashboard
Create Date: 2026-11-28 20:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_abuse_reports"
down_revision = "0010_dashboard"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "abuse_reports",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("doc", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("abuse_reports")
