"""Settings precedence: flags > environment > agnitra.toml > defaults."""

from __future__ import annotations

import pytest

from agnitra.config import Settings, load_settings
from agnitra.errors import UserError


def test_defaults(tmp_path):
    settings = load_settings(cwd=tmp_path, environ={})
    assert settings == Settings()


def test_file_then_environment_then_flags(tmp_path):
    (tmp_path / "agnitra.toml").write_text('[agnitra]\ndevice = "cpu"\ncache_dir = "/tmp/from-file"\n')
    from_file = load_settings(cwd=tmp_path, environ={})
    assert from_file.device == "cpu" and from_file.cache_dir == "/tmp/from-file"
    from_env = load_settings(cwd=tmp_path, environ={"AGNITRA_CACHE_DIR": "/tmp/from-env"})
    assert from_env.cache_dir == "/tmp/from-env" and from_env.device == "cpu"
    flagged = from_env.with_overrides(device="cuda", cache_dir=None)
    assert flagged.device == "cuda" and flagged.cache_dir == "/tmp/from-env"


def test_bad_config_file_is_a_user_error(tmp_path):
    (tmp_path / "agnitra.toml").write_text("device = \n")
    with pytest.raises(UserError, match="not valid TOML"):
        load_settings(cwd=tmp_path, environ={})
    (tmp_path / "agnitra.toml").write_text('colour = "blue"\n')
    with pytest.raises(UserError, match="unknown setting"):
        load_settings(cwd=tmp_path, environ={})


def test_every_agnitra_setting_is_read_by_config(monkeypatch):
    """AGNITRA_* variables are read in agnitra.config alone; AGNITRA_PDL=0 turns the kernels' PDL off."""
    import pathlib
    import re

    import agnitra
    from agnitra.config import kernel_pdl_enabled

    root = pathlib.Path(agnitra.__file__).parent
    readers = [p.relative_to(root).as_posix() for p in root.rglob("*.py") if re.search(r"environ[^\n]*AGNITRA_|getenv\([\"']AGNITRA_", p.read_text())]
    assert readers == ["config.py"]
    monkeypatch.setenv("AGNITRA_PDL", "0")
    assert not kernel_pdl_enabled()
    monkeypatch.setenv("AGNITRA_PDL", "1")
    assert kernel_pdl_enabled()
