"""Alembic environment of the store: run by agnitra.store.db.open_store (never from a file you pass)."""

from __future__ import annotations

from alembic import context

from agnitra.store.schema import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
