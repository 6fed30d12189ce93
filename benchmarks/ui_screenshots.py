"""Screenshots of the web UI for docs/service.md, from a real run: one `agnitra serve` and one
`agnitra worker` on loopback with a fresh store, a project, the zoo's BERT (tiny, batch 2) and one
optimization job on it, photographed in headless Chromium (Debian's /usr/bin/chromium).

    PYTHONPATH=src python benchmarks/ui_screenshots.py [--budget 2m] [--out docs/images]

Writes ui-dashboard.png, ui-model.png, ui-jobs.png (taken while the job runs) and ui-job.png.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from service import _start  # benchmarks/service.py: agnitra serve on loopback, its first admin key

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _wait(api: httpx.Client, job_id: int, until) -> dict:
    while not until(job := api.get(f"/v1/jobs/{job_id}").json()):
        time.sleep(1)
    return job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", default="2m", help="the job's budget")
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        server, url, headers = _start(folder)
        env = dict(os.environ, AGNITRA_DB_URL=f"sqlite:///{folder}/store.db", AGNITRA_CACHE_DIR=str(folder / "cache"))
        worker = subprocess.Popen([sys.executable, "-m", "agnitra.cli", "worker", "--data-dir", str(folder / "data")], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with httpx.Client(base_url=url, headers=headers, timeout=600) as api, sync_playwright() as playwright:
                api.post("/v1/projects", json={"name": "team"}).raise_for_status()
                model = api.post("/v1/models/import", json={"project": "team", "name": "bert-tiny", "zoo": "bert-base", "options": {"size": "tiny", "batch": 2}})
                model.raise_for_status()
                job = api.post("/v1/jobs/optimize", json={"model_id": model.json()["id"], "settings": {"budget": args.budget}}).json()
                browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                page.goto(url + "/")
                page.get_by_label("API key").fill(headers["Authorization"].split()[1])
                page.get_by_role("button", name="Sign in").click()
                page.get_by_role("heading", name="Dashboard").wait_for()

                def shot(path: str, name: str, full: bool = True) -> None:
                    page.goto(url + path)
                    page.wait_for_load_state("networkidle")
                    page.wait_for_timeout(800)
                    page.screenshot(path=str(args.out / f"ui-{name}.png"), full_page=full)
                    print(f"wrote {args.out / f'ui-{name}.png'}")

                _wait(api, job["id"], lambda j: j["progress"] >= 0.3 or j["status"] in ("done", "failed"))
                shot("/ui/jobs", "jobs", full=False)
                done = _wait(api, job["id"], lambda j: j["status"] in ("done", "failed", "cancelled"))
                print(f"job {done['id']}: {done['status']} {done.get('outcome', {}).get('verdict', done['error'])}")
                shot("/ui/", "dashboard", full=False)
                shot(f"/ui/models/{model.json()['id']}", "model")
                shot(f"/ui/jobs/{job['id']}", "job")
                browser.close()
        finally:
            worker.kill()
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
