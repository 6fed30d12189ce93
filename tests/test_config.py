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
