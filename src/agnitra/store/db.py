"""Opening the store: the URL (AGNITRA_DB_URL / agnitra.toml `db_url`, else SQLite in the cache
dir), the schema brought to the newest Alembic revision on open, and sessions."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterator

from sqlalchemy import Engine, create_engine, inspect
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from agnitra.config import Settings, load_settings
from agnitra.errors import UserError, first_line

DB_FILE = "agnitra.db"


def store_url(settings: Settings | None = None) -> str:
    settings = settings or load_settings()
    if settings.db_url:
        return _with_driver(settings.db_url)
    path = settings.cache_path / DB_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _with_driver(url: str) -> str:
    """postgresql:// URLs use psycopg 3 (the driver the dev extra installs)."""
    return "postgresql+psycopg://" + url.removeprefix("postgresql://") if url.startswith("postgresql://") else url


@dataclass
class Store:
    url: str
    engine: Engine

    @contextmanager
    def session(self) -> Iterator[Session]:
        with sessionmaker(self.engine, expire_on_commit=False)() as session, session.begin():
            yield session

    def revision(self) -> str | None:
        with self.engine.connect() as connection:
            if not inspect(connection).has_table("alembic_version"):
                return None
            return connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()

    def close(self) -> None:
        self.engine.dispose()


def open_store(url: str | None = None) -> Store:
    """The store at `url` (default: `store_url()`), migrated to the newest schema."""
    url = _with_driver(url) if url else store_url()
    try:
        engine = create_engine(url)
        migrate(engine)
    except SQLAlchemyError as exc:
        raise UserError(f"the measurement store at {safe_url(url)} cannot be opened: {first_line(exc)}; check AGNITRA_DB_URL") from exc
    except ModuleNotFoundError as exc:
        raise UserError(f"the measurement store at {safe_url(url)} needs the {exc.name} package: pip install 'agnitra[store]'") from exc
    return Store(url, engine)


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the schema up to `revision` with the store's own Alembic scripts."""
    _alembic(engine, "upgrade", revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    """Take the schema back to `revision` ("base": no tables)."""
    _alembic(engine, "downgrade", revision)


def _alembic(engine: Engine, direction: str, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(str(resources.files("agnitra.store") / "migrations"))))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        getattr(command, direction)(config, revision)


def safe_url(url: str) -> str:
    """The URL without its password."""
    head, sep, tail = url.partition("@")
    if not sep or "://" not in head:
        return url
    scheme, _, credentials = head.partition("://")
    return f"{scheme}://{credentials.split(':')[0]}@{tail}"
