"""The service's datasets (uploaded check inputs) and targets (named devices with their defaults).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("project_id", sa.Integer, sa.ForeignKey("projects.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("filename", sa.String(300), nullable=False),
        sa.Column("path", sa.String(1000), nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("summary", sa.JSON, nullable=False),
        sa.Column("created_by", sa.Integer, sa.ForeignKey("api_keys.id"), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_datasets_project", "datasets", ["project_id", "id"])
    op.create_table(
        "targets",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("project_id", sa.Integer, sa.ForeignKey("projects.id"), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("device", sa.String(20), nullable=False),
        sa.Column("dtype", sa.String(20), nullable=True),
        sa.Column("batch", sa.Integer, nullable=True),
        sa.Column("seq_len", sa.Integer, nullable=True),
        sa.Column("created_by", sa.Integer, sa.ForeignKey("api_keys.id"), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("project_id", "name", name="uq_targets_name"),
    )


def downgrade() -> None:
    op.drop_table("targets")
    op.drop_index("ix_datasets_project", "datasets")
    op.drop_table("datasets")
