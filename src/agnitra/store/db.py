"""Opening the store: the URL (AGNITRA_DB_URL / agnitra.toml `db_url`, else SQLite in the cache
dir), the schema brought to the newest Alembic revision on open, and sessions."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterator

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.exc import DatabaseError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from agnitra.config import Settings, load_settings, where_set
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
    # made once: a sessionmaker made per session set up SQLAlchemy's event dispatch for a new class each time
    sessions: sessionmaker = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self.sessions() as session, session.begin():
            yield session

    def revision(self) -> str | None:
        with self.engine.connect() as connection:
            if not inspect(connection).has_table("alembic_version"):
                return None
            return connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()

    def close(self) -> None:
        self.engine.dispose()


def open_store(url: str | None = None, *, otherwise: str = "", connections: int | None = None) -> Store:
    """The store at `url` (default: `store_url()`), migrated to the newest schema. A store that
    cannot be opened is one line naming it (a URL without its password, the default store's file)
    and the fix; `otherwise`: another way out the caller offers, e.g. 'pass --no-store';
    `connections`: the pool's size where many threads share the store (the service; SQLite then
    in WAL, which the file keeps, so the service's workers read while it writes)."""
    settings = load_settings()
    given = url or settings.db_url
    full = _with_driver(url) if url else store_url(settings)
    alternative = f" or {otherwise}" if otherwise else ""
    try:
        engine = create_engine(full, **({"pool_size": connections, "max_overflow": connections} if connections else {}))
        if connections and engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_for_many)
            _one_writer_at_a_time(engine)
        migrate(engine)
    except ModuleNotFoundError as exc:
        raise UserError(f"the measurement store at {safe_url(given or full)} needs the {exc.name} package: pip install 'agnitra[store]'{alternative}") from exc
    except (SQLAlchemyError, ValueError, OSError) as exc:  # a URL SQLAlchemy cannot parse, a driver's refusal, a damaged file
        reason = _without_password(first_line(exc), given or full)
        if given:
            where = "the URL given" if url else (where_set("db_url") or "AGNITRA_DB_URL")
            raise UserError(f"the measurement store at {safe_url(given)} cannot be opened ({reason}): fix {where}{alternative}") from exc
        path = settings.cache_path / DB_FILE
        if isinstance(exc, DatabaseError) and not isinstance(exc, OperationalError):  # "file is not a database", "malformed"
            raise UserError(f"the default store {path} is damaged ({reason}): move it away (a new one is created){alternative}") from exc
        raise UserError(f"the default store {path} cannot be opened ({reason}): set AGNITRA_CACHE_DIR to a folder you can write{alternative}") from exc
    return Store(full, engine)


def _sqlite_for_many(connection, _record) -> None:
    """SQLite shared by many threads and processes (the service and its workers): readers do not
    wait for a writer (WAL), a writer waits its turn."""
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_S * 1000)}")
    cursor.close()


SQLITE_BUSY_S = 30.0  # busy_timeout: how long a writer waits for the database's write lock
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "SAVEPOINT")  # what takes SQLite's write lock (pysqlite begins before them)


def _one_writer_at_a_time(engine: Engine) -> None:
    """This process's threads take SQLite's one write lock in turn, queued on a lock of their own
    and woken as the last writer's connection goes back to the pool (after its commit or rollback);
    a thread that met SQLite's lock held slept in its busy handler instead (1, 2, 5 ... 100 ms,
    however soon it was free). Other processes (the workers) still meet SQLite's busy timeout."""
    lock = threading.Lock()

    @event.listens_for(engine, "before_cursor_execute")
    def _writing(connection, cursor, statement, parameters, context, executemany) -> None:
        if "writer" not in connection.info and statement.lstrip()[:9].upper().startswith(WRITES):
            if not lock.acquire(timeout=SQLITE_BUSY_S):
                raise sqlite3.OperationalError("database is locked (another thread of this process held it)")
            connection.info["writer"] = True

    @event.listens_for(engine, "checkin")
    def _written(dbapi_connection, record) -> None:
        if record.info.pop("writer", False):
            lock.release()


def held_elsewhere(error: BaseException) -> bool:
    """Whether open_store failed only because another process holds the store (SQLite's lock): a
    passing state, not a fault in the store or its URL."""
    cause = error.__cause__ if isinstance(error, UserError) else error
    return isinstance(cause, OperationalError) and "locked" in str(cause).lower()


def _without_password(text: str, url: str) -> str:
    """An error's text with the URL's password, should the driver repeat it, masked."""
    head, sep, _ = url.partition("@")
    password = head.partition("://")[2].partition(":")[2] if sep else ""
    return text.replace(password, "***") if password else text


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
