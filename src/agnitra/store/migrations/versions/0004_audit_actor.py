"""The audit log names who acted (actor: key:ID or oidc:SUBJECT), since OIDC tokens have no key row.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    with op.batch_alter_table("audit_logs") as table:
        table.add_column(sa.Column("actor", sa.String(300), nullable=False, server_default=""))
    op.execute("UPDATE audit_logs SET actor = 'key:' || CAST(key_id AS VARCHAR(20)) WHERE key_id IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("audit_logs") as table:
        table.drop_column("actor")
