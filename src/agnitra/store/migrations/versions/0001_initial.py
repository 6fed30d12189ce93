"""The store's first schema: workloads, devices, runs, measurements.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("source", sa.String(500), nullable=False),
        sa.Column("task", sa.String(40), nullable=False),
        sa.Column("weights", sa.String(20), nullable=False),
        sa.Column("dtype", sa.String(40), nullable=False),
        sa.Column("params", sa.BigInteger, nullable=True),
        sa.Column("signature_version", sa.String(40), nullable=False),
        sa.Column("signature", sa.JSON, nullable=False),
        sa.Column("op_mix", sa.JSON, nullable=False),
        sa.UniqueConstraint("key", name="uq_workloads_key"),
    )
    op.create_table(
        "devices",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("signature", sa.JSON, nullable=False),
        sa.UniqueConstraint("key", name="uq_devices_key"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("origin", sa.String(1000), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("workload_id", sa.Integer, sa.ForeignKey("workloads.id"), nullable=False),
        sa.Column("device_id", sa.Integer, sa.ForeignKey("devices.id"), nullable=False),
        sa.Column("conditions", sa.JSON, nullable=False),
        sa.Column("versions", sa.JSON, nullable=False),
        sa.Column("verdict", sa.Text, nullable=False),
    )
    op.create_index("ix_runs_fingerprint", "runs", ["fingerprint"])
    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("phase", sa.String(20), nullable=False),
        sa.Column("variant", sa.Text, nullable=False),
        sa.Column("recipe", sa.JSON, nullable=True),
        sa.Column("recipe_key", sa.Text, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("median_ms", sa.Float, nullable=True),
        sa.Column("p95_ms", sa.Float, nullable=True),
        sa.Column("baseline_ms", sa.Float, nullable=True),
        sa.Column("throughput", sa.Float, nullable=True),
        sa.Column("throughput_unit", sa.String(40), nullable=False),
        sa.Column("model_bytes", sa.BigInteger, nullable=True),
        sa.Column("peak_memory_bytes", sa.BigInteger, nullable=True),
        sa.Column("energy_j_per_item", sa.Float, nullable=True),
        sa.Column("quality_metric", sa.String(40), nullable=False),
        sa.Column("quality_value", sa.Float, nullable=True),
        sa.Column("passed", sa.Boolean, nullable=True),
        sa.Column("quality", sa.JSON, nullable=False),
        sa.Column("setup_s", sa.Float, nullable=True),
    )
    op.create_index("ix_measurements_run_id", "measurements", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_measurements_run_id", "measurements")
    op.drop_table("measurements")
    op.drop_index("ix_runs_fingerprint", "runs")
    op.drop_table("runs")
    op.drop_table("devices")
    op.drop_table("workloads")
