"""service users, reserved addresses, vaults and secrets

Revision ID: 0008_vendor
Revises: 0003
Create Date: 2026-11-25 09:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_vendor"
down_revision = "0003"
branch_labels = None
depends_on = None


def _table(name: str, *keys: str) -> None:
    cols: list[sa.Column[str] | sa.Constraint] = [
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("doc", sa.Text(), nullable=False),
    ]
    cols += [sa.Column(f"k_{k}", sa.String(length=255), nullable=False) for k in keys]
    cols.append(sa.PrimaryKeyConstraint("id"))
    if keys:
        cols.append(sa.UniqueConstraint(*[f"k_{k}" for k in keys],
                                        name=f"uq_{name}_{'_'.join(keys)}"))
    op.create_table(name, *cols)


def upgrade() -> None:
    _table("service_users")
    _table("reserved_addrs", "addr")
    _table("vaults", "name")
    _table("vault_secrets", "vault_id", "name")


def downgrade() -> None:
    for name in ("vault_secrets", "vaults", "reserved_addrs", "service_users"):
        op.drop_table(name)
