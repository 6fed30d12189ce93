"""A real `agnitra serve` on 127.0.0.1 for the service's tests: a SQLite store and data folder in a
temporary folder, the first admin key read from its log, keys of any role made in its store; the
API under Uvicorn in a thread of the test's own process (`InThread`: no server process's imports),
and the helpers the tests share (a job waited for, a small ONNX model)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import torch
import uvicorn

from agnitra.service.serve import make_key

TINY_BERT = {"project": "team", "name": "bert", "zoo": "bert-base", "options": {"size": "tiny", "batch": 2}}
QUICK_JOB = {"budget": "60s", "transforms": ["threads"], "peers": []}


def session_cache(folder: Path) -> Path:
    """The cache conftest gives every test of the session (`agnitra-cache` in the session's base
    folder, which holds `folder`, a tmp_path_factory folder): the device's ceilings are measured
    once a session, not again by the first job of each server."""
    return folder.parent / "agnitra-cache"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, folder: Path, workers: int, *extra: str) -> None:
        self.folder, self.port = folder, free_port()
        self.env = dict(os.environ, AGNITRA_DB_URL=f"sqlite:///{folder}/store.db", AGNITRA_CACHE_DIR=str(session_cache(folder)), AGNITRA_LEASE_S="6")
        self.log = (folder / "server.log").open("w")
        self.process = subprocess.Popen([sys.executable, "-m", "agnitra.cli", "serve", "--port", str(self.port), "--workers", str(workers),
                                         "--data-dir", str(folder / "data"), *extra], env=self.env, stderr=self.log, stdout=self.log)
        self.admin = self._wait_for_key()
        self.url = f"http://127.0.0.1:{self.port}"

    def _wait_for_key(self) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = (self.folder / "server.log").read_text()
            found = re.search(r"first admin key \(shown once; keep it\): (agn_\S+)", text)
            if found and "serving on" in text:
                for _ in range(100):
                    try:
                        httpx.get(f"http://127.0.0.1:{self.port}/v1/health", timeout=1)
                        return found[1]
                    except httpx.HTTPError:
                        time.sleep(0.1)
            assert self.process.poll() is None, text
            time.sleep(0.1)
        raise AssertionError((self.folder / "server.log").read_text())

    def client(self, key: str | None) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=120)

    def key(self, role: str, project: str | None = None) -> str:
        old = os.environ.get("AGNITRA_DB_URL")
        os.environ["AGNITRA_DB_URL"] = self.env["AGNITRA_DB_URL"]
        try:
            return make_key(f"test {role}", role, project)
        finally:
            os.environ.pop("AGNITRA_DB_URL") if old is None else os.environ.__setitem__("AGNITRA_DB_URL", old)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


class InThread:
    """`app` under Uvicorn in a thread of this process, on 127.0.0.1 at `url`, until `stop`."""

    def __init__(self, app) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the service did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.server.config.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def onnx_linear(folder: Path) -> bytes:
    path = folder / "linear.onnx"
    torch.onnx.export(torch.nn.Linear(8, 4), (torch.randn(2, 8),), str(path), dynamo=False)
    return path.read_bytes()


def wait(client: httpx.Client, job_id: int, until=("done", "failed", "cancelled"), seconds: float = 150) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in until:
            return job
        time.sleep(0.2)
    raise AssertionError(job)


def store_head() -> str:
    """The newest revision of the store's Alembic scripts: what a store opened by this version is at."""
    from importlib import resources

    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(resources.files("agnitra.store") / "migrations"))
    return ScriptDirectory.from_config(config).get_current_head()
