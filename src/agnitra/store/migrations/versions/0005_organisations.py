"""Organisations above projects: a project may belong to one, a key may cover one's projects.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.create_table(
        "organisations",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("name", name="uq_organisations_name"),
    )
    with op.batch_alter_table("projects") as table:
        table.add_column(sa.Column("organisation_id", sa.Integer(), nullable=True))
        table.create_foreign_key("fk_projects_organisation", "organisations", ["organisation_id"], ["id"])
    with op.batch_alter_table("api_keys") as table:
        table.add_column(sa.Column("organisation_id", sa.Integer(), nullable=True))
        table.create_foreign_key("fk_api_keys_organisation", "organisations", ["organisation_id"], ["id"])


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as table:
        table.drop_constraint("fk_api_keys_organisation", type_="foreignkey")
        table.drop_column("organisation_id")
    with op.batch_alter_table("projects") as table:
        table.drop_constraint("fk_projects_organisation", type_="foreignkey")
        table.drop_column("organisation_id")
    op.drop_table("organisations")
