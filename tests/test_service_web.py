"""The web UI in a real headless Chromium (Debian's /usr/bin/chromium through Playwright) against a
real `agnitra serve` with one worker: sign in with a key, create a project, upload a model, look at
its op mix, start a job and watch it finish on the page, read its outcome, download its Pareto CSV
and recipe; keyboard navigation and labels; a finished job's Pareto plot, candidates and recipe
snippets drawn from known answers; nothing loaded from anywhere but the server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from playwright.sync_api import Page, expect, sync_playwright
from service_server import Server

CHROMIUM = "/usr/bin/chromium"  # `make test` installs Debian's chromium; Playwright's own browsers are never downloaded
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
JOB = {"budget": "60s", "transforms": "threads"}  # QUICK_JOB of service_server.py, as the form takes it
FINISHED = ("done", "failed", "cancelled")

# the labelled controls, table headers and chart names a screen reader needs, on whatever page is shown
A11Y_GAPS = """() => {
  const gaps = [];
  for (const el of document.querySelectorAll("input:not([type=hidden]), select, textarea")) {
    if (!el.labels.length && !el.getAttribute("aria-label")) gaps.push(`unlabelled ${el.tagName} ${el.name}`);
  }
  for (const t of document.querySelectorAll("table")) {
    if (!t.querySelector("caption") || !t.querySelectorAll("thead th[scope=col]").length) gaps.push("a table without caption or column headers");
  }
  for (const svg of document.querySelectorAll("svg[role=img]")) {
    const ids = (svg.getAttribute("aria-labelledby") || "").split(" ").filter(Boolean);
    if (!ids.length || ids.some((id) => !(document.getElementById(id) || {}).textContent)) gaps.push(`chart ${svg.id} without a name`);
  }
  return gaps;
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = Server(tmp_path_factory.mktemp("web"), 1)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: apt-get install -y chromium (make test does)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


class Watched:
    """A page with what it asked for and what went wrong in it recorded."""

    def __init__(self, browser, server: Server) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        self.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
        self.page, self.server = self.context.new_page(), server
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        # a refused request (the wrong key's 401) is the page's to show, not a script error
        self.page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" and not message.text.startswith("Failed to load resource") else None)

    def sign_in(self, key: str) -> Page:
        self.page.goto(self.server.url + "/")
        self.page.get_by_label("API key").fill(key)
        self.page.get_by_role("button", name="Sign in").click()
        expect(self.page.get_by_role("heading", name="Dashboard")).to_be_visible()
        return self.page

    def check(self) -> None:
        """Only the server was asked for anything; no script error; every control labelled."""
        foreign = [url for url in self.requests if not url.startswith(self.server.url) and not url.startswith(("blob:", "data:"))]
        assert not foreign, foreign
        assert not self.errors, self.errors
        assert self.page.evaluate(A11Y_GAPS) == []


def _block_onnx(folder: Path) -> Path:
    """A small ONNX model with a few kinds of op: its jobs take seconds."""
    block = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64), torch.nn.GELU(), torch.nn.Linear(64, 8), torch.nn.Softmax(-1))
    path = folder / "block.onnx"
    torch.onnx.export(block, (torch.randn(4, 32),), str(path), dynamo=False)
    return path


def _tab_to(page: Page, name: str, presses: int = 40) -> list[str]:
    """Tab until the focused element's accessible text is `name`; the names passed on the way."""
    seen = []
    for _ in range(presses):
        page.keyboard.press("Tab")
        seen.append(page.evaluate("() => { const el = document.activeElement; return (el.labels && el.labels[0] ? el.labels[0].textContent : el.getAttribute('aria-label') || el.textContent || '').trim(); }"))
        if seen[-1] == name:
            return seen
    raise AssertionError(f"Tab never reached {name!r}; it went through {seen}")


def test_the_web_ui_end_to_end(server, browser, tmp_path):
    anyone = server.client(None)
    assert anyone.get("/").headers["content-type"].startswith("text/html") and "Agnitra" in anyone.get("/ui/jobs/7").text
    assert anyone.get("/ui/static/nothing.js").status_code == 404
    admin = server.client(server.admin)
    ui = Watched(browser, server)
    page = ui.page

    # a wrong key is refused in one line; the right one opens the dashboard
    page.goto(server.url + "/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    page.get_by_label("API key").fill("agn_not-a-key")
    page.get_by_label("API key").press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("The key was refused: an API key is needed")
    page.get_by_label("API key").fill(server.admin)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
    expect(page.locator(".card", has_text="Projects").locator("dd")).to_have_text("0")

    # a project made from the keyboard; a model uploaded into it, with its op mix drawn
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Projects").click()
    expect(page.get_by_role("heading", name="Projects")).to_be_focused()
    _tab_to(page, "Project name")
    page.keyboard.type("team")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Models")).to_be_visible()
    page.get_by_label("Model file").set_input_files(_block_onnx(tmp_path))
    expect(page.get_by_label("Name", exact=True).last).to_have_value("block")
    page.get_by_role("button", name="Upload").click()
    _check_a_known_answer(browser, server)  # in another tab, while the server reads the upload's graph
    expect(page.get_by_role("heading", name="block", exact=True)).to_be_visible(timeout=120_000)
    model = _listed_models(server, admin)
    kinds = page.locator("table", has_text="The op mix as a table").locator("tbody th").all_inner_texts()
    assert sorted(kinds) == sorted(model["summary"]["op_mix"]) and len(kinds) >= 3
    expect(page.get_by_role("img", name=re.compile("Op mix of block"))).to_be_visible()
    ui.check()

    # a job with a small budget, started from the model's page
    page.get_by_label("Budget").fill(JOB["budget"])
    page.get_by_label("Transforms").fill(JOB["transforms"])
    page.get_by_label("Compare with torch.compile and ONNX Runtime").uncheck()
    page.get_by_role("button", name="Start job").click()
    expect(page.get_by_role("heading", name=re.compile(r"Job #\d+"))).to_be_visible()
    job_id = int(page.get_by_role("heading", name=re.compile(r"Job #\d+")).inner_text().split("#")[1])
    assert admin.get(f"/v1/jobs/{job_id}").json()["settings"] == {"budget": JOB["budget"], "objective": "latency", "transforms": ["threads"], "peers": []}

    # while it runs: the jobs list, reached and worked from the keyboard, follows it live
    page.goto(server.url + "/ui/jobs")
    expect(page.locator(f"#job-row-{job_id}")).to_be_visible()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to main content"
    expect(page.locator(".skip")).to_have_css("outline-style", "solid")  # focus is visible
    passed = _tab_to(page, f"#{job_id}")
    assert {"Dashboard", "Projects", "Models", "Jobs", "Recipes", "Audit log", "Sign out", "Project", "Status"} <= set(passed), passed
    page.locator(".skip").focus()
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    assert _tab_to(page, f"#{job_id}")[0] == "Project"  # the skip link passes over the navigation
    expect(page.locator(f"#job-row-{job_id}")).to_have_attribute("data-status", re.compile("|".join(FINISHED)), timeout=180_000)
    job = admin.get(f"/v1/jobs/{job_id}").json()
    expect(page.locator(f"#job-row-{job_id} .status")).to_have_text(job["status"])

    # the job's page: its status, events and outcome as the API has them
    page.keyboard.press("Enter")  # the focused link to the job
    expect(page.get_by_role("heading", name=f"Job #{job_id}")).to_be_focused()
    expect(page.get_by_role("status").locator(".status")).to_have_text(job["status"])
    expect(page.get_by_role("list", name="Events").locator("li")).to_have_count(len(job["events"]))
    if job["status"] == "done":
        _check_outcome(page, admin, job)
    else:
        expect(page.get_by_role("alert")).to_contain_text(job["error"][:60])
    ui.check()

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit log").click()
    for action in ("project.create", "model.import", "job.submit"):
        expect(page.get_by_role("cell", name=action, exact=True).first).to_be_visible()
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Dashboard").click()
    expect(page.locator(".card", has_text=f"Jobs {job['status']}").locator("dd")).to_have_text("1")
    ui.check()


def _listed_models(server: Server, admin) -> dict:
    """GET /v1/models: a project's models, paged, within the key's scope; the one model uploaded."""
    listed = admin.get("/v1/models", params={"project": "team", "limit": 1}).json()
    assert listed["total"] == 1 and listed["limit"] == 1 and listed["offset"] == 0 and listed["models"][0]["name"] == "block"
    assert admin.get("/v1/models", params={"offset": 1}).json()["models"] == []
    assert admin.get("/v1/models", params={"project": "nowhere"}).status_code == 404
    assert admin.post("/v1/projects", json={"name": "elsewhere"}).status_code == 201
    scoped = server.client(server.key("viewer", "elsewhere"))
    assert scoped.get("/v1/models").json()["total"] == 0 and scoped.get("/v1/models", params={"project": "team"}).json()["models"] == []
    assert server.client(None).get("/v1/models").status_code == 401
    return listed["models"][0]


def _check_outcome(page: Page, admin, job: dict) -> None:
    outcome = job["outcome"]
    expect(page.locator("#verdict")).to_have_text(outcome["verdict"])
    points = [p for p in admin.get(f"/v1/pareto/{job['id']}").json()["points"] if p["latency_ms"] is not None and p["error"] is not None]
    expect(page.locator("#pareto-chart [data-candidate]")).to_have_count(len(points))
    expect(page.locator("#pareto-summary")).to_contain_text(f"{len(points)} measured candidate(s)" if points else "No candidate was measured")
    expect(page.locator("table", has_text="candidate(s)").locator("tbody th")).to_have_count(outcome["candidates"])
    with page.expect_download() as csv:
        page.get_by_role("button", name="Download Pareto CSV").click()
    assert Path(csv.value.path()).read_bytes() == admin.get(f"/v1/pareto/{job['id']}", params={"format": "csv"}).content
    with page.expect_download() as recipe:
        page.get_by_role("button", name="Download recipe JSON").click()
    assert json.loads(Path(recipe.value.path()).read_text())["steps"] == outcome["recipe"]["steps"]
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Recipes").click()
    expect(page.get_by_role("row", name=re.compile(f"#{job['id']} ")).first).to_be_visible()
    page.go_back()
    expect(page.get_by_role("heading", name=f"Job #{job['id']}")).to_be_visible()


KNOWN_JOB = {"id": 999, "project_id": 1, "model_id": 998, "type": "schedule", "settings": {"budget": "10m"}, "status": "done", "progress": 1.0, "attempts": 1, "error": "",
             "created_at": "2026-01-01T10:00:00+00:00", "started_at": "2026-01-01T10:00:01+00:00", "finished_at": "2026-01-01T10:10:00+00:00",
             "events": [{"at": "2026-01-01T10:00:00+00:00", "message": "queued", "fraction": None}, {"at": "2026-01-01T10:10:00+00:00", "message": "done", "fraction": 1.0}],
             "outcome": {"verdict": "int8 is 1.8x the original", "speedup": 1.8, "chosen": "int8-weight-only + compile", "candidates": 3,
                         "recipe": {"version": "agnitra.recipe/1", "steps": [{"transform": "int8-weight-only", "params": {}}, {"transform": "compile", "params": {}}]}}}
KNOWN_MODEL = {"id": 998, "project_id": 1, "name": "bert", "kind": "zoo", "options": {"size": "tiny", "batch": 2}, "size_bytes": None, "sha256": "",
               "summary": {"workload": {"source": "zoo:bert-base"}}, "created_at": "2026-01-01T09:00:00+00:00"}
KNOWN_POINTS = [{"candidate": "999-0", "name": "compile", "latency_ms": 4.0, "memory_bytes": 400_000_000, "error": 1e-6, "on_front": True},
                {"candidate": "999-1", "name": "int8-weight-only + compile", "latency_ms": 2.2, "memory_bytes": 110_000_000, "error": 4e-3, "on_front": True},
                {"candidate": "999-2", "name": "fp16", "latency_ms": 4.4, "memory_bytes": 200_000_000, "error": 5e-3, "on_front": False}]
KNOWN_CSV = "candidate,name,latency_ms,memory_bytes,error,on_front\n999-0,compile,4.0,400000000,1e-06,True\n"


def _known(route) -> None:
    """The API's answers for a finished job 999 (three candidates, a two-step recipe)."""
    url = route.request.url
    if "/v1/pareto/999" in url:
        return route.fulfill(body=KNOWN_CSV, content_type="text/csv") if "format=csv" in url else route.fulfill(json={"job": 999, "points": KNOWN_POINTS})
    if "/v1/candidates/999-" in url:
        i = int(url.rsplit("-", 1)[1])
        point = KNOWN_POINTS[i]
        return route.fulfill(json={"id": point["candidate"], "job": 999, "name": point["name"], "status": "ok", "latency_ms": {"median": point["latency_ms"]}, "speedup": 4.0 / point["latency_ms"],
                                   "model_bytes": point["memory_bytes"], "correctness": {"metric": "rel_error", "value": point["error"], "passed": True}, "peer": None})
    if url.endswith("/v1/export"):
        return route.fulfill(json=KNOWN_JOB["outcome"]["recipe"])
    return route.fulfill(json=KNOWN_MODEL if "/v1/models/998" in url else KNOWN_JOB)


def _check_a_known_answer(browser, server: Server) -> None:
    """A finished job's page drawn from known answers: the scatter's points, sizes and classes, its
    text summary, the candidates table, the recipe with its CLI and SDK snippets, the CSV download."""
    ui = Watched(browser, server)
    page = ui.sign_in(server.admin)
    for pattern in ("**/v1/jobs/999", "**/v1/models/998", "**/v1/pareto/999*", "**/v1/candidates/999-*", "**/v1/export"):
        page.route(pattern, _known)
    page.goto(server.url + "/ui/jobs/999")
    chart = page.get_by_role("img", name=re.compile("Pareto plot: latency against error"))
    expect(chart).to_be_visible()
    circles = page.locator("#pareto-chart [data-candidate]")
    expect(circles).to_have_count(3)
    expect(page.locator("#pareto-chart circle.front[data-candidate]")).to_have_count(2)
    expect(page.locator('#pareto-chart circle.chosen[data-candidate="999-1"]')).to_have_count(1)
    radius = {c: float(page.locator(f'[data-candidate="{c}"]').get_attribute("r")) for c in ("999-0", "999-1", "999-2")}
    assert radius["999-0"] > radius["999-2"] > radius["999-1"]  # marker size follows the model's memory
    x = {c: float(page.locator(f'[data-candidate="{c}"]').get_attribute("cx")) for c in ("999-0", "999-1")}
    assert x["999-1"] < x["999-0"]  # faster is further left
    expect(page.locator("#pareto-summary")).to_have_text(re.compile(r"3 measured candidate\(s\), 2 on the Pareto front\. Fastest: int8-weight-only \+ compile at 2\.20 ms"))
    expect(page.locator("table", has_text="3 candidate(s)").locator("tbody tr")).to_have_count(3)
    expect(page.locator("tr.chosen")).to_contain_text("int8-weight-only + compile")
    expect(page.get_by_role("list", name="Recipe steps").locator("li")).to_have_text(["int8-weight-only", "compile"])
    cli = "agnitra bench zoo:bert-base --size tiny --batch 2 --variants eager --recipe recipe.json"
    expect(page.get_by_label("CLI snippet", exact=True)).to_contain_text(cli)
    expect(page.get_by_label("SDK snippet", exact=True)).to_contain_text('fast = agnitra.apply("zoo:bert-base", "recipe.json", size="tiny", batch=2)')
    page.get_by_role("button", name="Copy the CLI snippet").click()
    expect(page.locator(".snippet", has_text="CLI snippet")).to_contain_text("Copied.")
    assert cli in page.evaluate("navigator.clipboard.readText()")
    with page.expect_download() as csv:
        page.get_by_role("button", name="Download Pareto CSV").click()
    assert Path(csv.value.path()).read_text() == KNOWN_CSV and csv.value.suggested_filename == "pareto-job-999.csv"
    with page.expect_download() as recipe:
        page.get_by_role("button", name="Download recipe JSON").click()
    assert json.loads(Path(recipe.value.path()).read_text()) == KNOWN_JOB["outcome"]["recipe"]
    ui.check()
    ui.context.close()
