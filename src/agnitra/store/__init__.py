"""The measurement store: every candidate `optimize` or `bench` measures, with its workload, device,
recipe, status and figures (SQLAlchemy 2, Alembic migrations; SQLite in the cache dir by default,
any URL through AGNITRA_DB_URL)."""

from agnitra.store.db import Store, open_store, store_url
from agnitra.store.io import ImportResult, counts, export_csv, import_runs
from agnitra.store.record import record_report

__all__ = ["ImportResult", "Store", "counts", "export_csv", "import_runs", "open_store", "record_report", "store_url"]
