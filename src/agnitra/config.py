"""Settings: flags > environment (AGNITRA_*) > agnitra.toml > defaults.

Only what several stages share lives here; each command's own options stay with the command.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from agnitra.errors import UserError

_ENV_PREFIX = "AGNITRA_"
_CONFIG_FILE = "agnitra.toml"


@dataclass(frozen=True)
class Settings:
    device: str = "auto"  # cpu | cuda | auto
    cache_dir: str = str(Path.home() / ".cache" / "agnitra")
    db_url: str = ""  # the measurement store (AGNITRA_DB_URL); empty means SQLite under cache_dir
    oidc_issuer: str = ""  # `agnitra serve` takes OIDC bearer tokens from this issuer (AGNITRA_OIDC_ISSUER); empty: API keys only
    oidc_audience: str = ""  # the audience those tokens must carry (AGNITRA_OIDC_AUDIENCE)

    def with_overrides(self, **overrides: Any) -> "Settings":
        """A copy with every non-None override applied (the flags of one command)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        return replace(self, **given)

    @property
    def cache_path(self) -> Path:
        return Path(self.cache_dir).expanduser()


def _from_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path} is not valid TOML ({exc}); fix or remove it") from exc
    known = {f.name for f in fields(Settings)}
    section = data.get("agnitra", data)
    if not isinstance(section, dict):
        raise UserError(f"{path.name}: `agnitra` must be a table ([agnitra] with its settings under it), got {section!r}")
    unknown = sorted(set(section) - known)
    if unknown:
        raise UserError(f"{path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for name, value in section.items():
        if not isinstance(value, str):
            kind, example = _EXPECTED[name]
            raise UserError(f"{path.name}: `{name}` must be a string ({kind}), got {_toml_value(value)}; write it in quotes, e.g. {name} = \"{example}\"")
    return dict(section)


# what each setting's string holds, for the message when agnitra.toml gives another type
_EXPECTED = {"device": ("cpu, cuda or auto", "cpu"), "cache_dir": ("a folder", "~/.cache/agnitra"), "db_url": ("a database URL", "sqlite:////path/to/store.db"),
             "oidc_issuer": ("an OIDC issuer URL", "https://login.example.com"), "oidc_audience": ("a token audience", "agnitra")}


def _toml_value(value: Any) -> str:
    """A value as TOML writes it, shortened: what the user typed, for a one-line message."""
    text = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _from_env(environ: dict[str, str]) -> dict[str, Any]:
    values = {}
    for f in fields(Settings):
        key = _ENV_PREFIX + f.name.upper()
        if environ.get(key):
            values[f.name] = environ[key]
    return values


def load_settings(cwd: Path | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Defaults, then agnitra.toml in the working directory, then AGNITRA_* variables."""
    cwd = cwd or Path.cwd()
    environ = dict(os.environ) if environ is None else environ
    values = _from_file(cwd / _CONFIG_FILE)
    values.update(_from_env(environ))
    return Settings(**values)


def where_set(name: str, cwd: Path | None = None, environ: dict[str, str] | None = None) -> str:
    """Where a setting's value comes from, for a message's fix: AGNITRA_NAME, `name` in agnitra.toml,
    or '' (its default)."""
    environ = dict(os.environ) if environ is None else environ
    if environ.get(_ENV_PREFIX + name.upper()):
        return _ENV_PREFIX + name.upper()
    return f"`{name}` in {_CONFIG_FILE}" if name in _from_file((cwd or Path.cwd()) / _CONFIG_FILE) else ""


def kernel_pdl_enabled() -> bool:
    """AGNITRA_PDL=0 turns programmatic dependent launch off for Agnitra's kernels. Asked at every
    kernel launch, so from the environment alone (no agnitra.toml read on that path)."""
    return os.environ.get(_ENV_PREFIX + "PDL", "1") != "0"


def job_lease_seconds() -> float:
    """How long a service worker's claim on a job lasts without renewal (AGNITRA_LEASE_S, default
    30 s); tests shorten it to see a killed worker's job queued again."""
    return float(os.environ.get(_ENV_PREFIX + "LEASE_S", "30"))


def ray_task_cpus() -> float:
    """The CPUs a job's Ray task asks for under `--executor ray` (AGNITRA_RAY_CPUS, default 1);
    the node's core count gives each job a node of its own, as timing wants."""
    value = os.environ.get(_ENV_PREFIX + "RAY_CPUS", "1")
    try:
        cpus = float(value)
    except ValueError:
        cpus = -1.0
    if cpus < 0:
        raise UserError(f"AGNITRA_RAY_CPUS must be a number of CPUs (0 or more), got {value!r}")
    return cpus


def give_ray_task_cpus(cpus: float) -> None:
    """This process's AGNITRA_RAY_CPUS set to another's setting (a job's Ray task takes its
    worker's, not its node's: the process is the job's alone)."""
    os.environ[_ENV_PREFIX + "RAY_CPUS"] = f"{cpus:g}"


def ray_evaluators() -> int:
    """The Ray evaluation slots a service job's candidates are measured on under `--executor ray`
    (AGNITRA_RAY_EVALUATORS, default 2; 0: one at a time in the job's own worker process)."""
    value = os.environ.get(_ENV_PREFIX + "RAY_EVALUATORS", "2")
    if not value.isdigit():
        raise UserError(f"AGNITRA_RAY_EVALUATORS must be a number of evaluation slots (0 or more), got {value!r}")
    return int(value)


def ray_address() -> str:
    """The Ray cluster `--executor ray` connects to: RAY_ADDRESS, Ray's own variable (ray.init reads
    it too); empty: a Ray instance on this machine."""
    return os.environ.get("RAY_ADDRESS", "")


def worker_fork_enabled() -> bool:
    """AGNITRA_WORKER_FORK=0: CPU workers start as fresh interpreters instead of being forked from
    a process that has imported torch (`bench.fork_server`)."""
    return os.environ.get(_ENV_PREFIX + "WORKER_FORK", "1") != "0"
