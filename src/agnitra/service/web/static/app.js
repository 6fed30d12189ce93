// Agnitra web UI: one page over the /v1 API, plain JavaScript, nothing loaded from elsewhere.
// The API key the user signs in with stays in sessionStorage and goes out as Authorization: Bearer.
"use strict";

const KEY = "agnitra.key", ADMIN = "agnitra.admin";
const STATUSES = ["queued", "running", "done", "failed", "cancelled"];
const FINISHED = new Set(["done", "failed", "cancelled"]);
const ZOO = ["bert-base", "minilm", "tinylm", "tinylm-py", "resnet50", "llama-1b", "llama-8b", "mamba", "whisper-tiny"];
const OBJECTIVES = ["latency", "throughput", "memory", "energy"];
const PAGE = 25;
const POLL_MS = 1000;
const SVG = "http://www.w3.org/2000/svg";

// ---- DOM helpers: text always goes in as text, never as HTML

function h(tag, props, ...children) {
  const el = document.createElement(tag);
  setProps(el, props);
  el.append(...flat(children));
  return el;
}

function s(tag, props, ...children) {
  const el = document.createElementNS(SVG, tag);
  setProps(el, props);
  el.append(...flat(children));
  return el;
}

function setProps(el, props) {
  for (const [name, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "text") el.textContent = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
}

function flat(children) {
  return children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false).map((c) => (c instanceof Node ? c : document.createTextNode(String(c))));
}

let uid = 0;
const nextId = (prefix) => `${prefix}-${++uid}`;

function field(labelText, control, hint) {
  control.id = control.id || nextId("f");
  const hintEl = hint ? h("span", { class: "hint", id: `${control.id}-hint` }, hint) : null;
  if (hintEl) control.setAttribute("aria-describedby", hintEl.id);
  return h("div", { class: control.tagName === "TEXTAREA" || control.type === "file" ? "field grow" : "field" }, h("label", { for: control.id }, labelText), control, hintEl);
}

function checkbox(labelText, control) {
  control.id = control.id || nextId("f");
  return h("div", { class: "field check" }, control, h("label", { for: control.id }, labelText));
}

function table(caption, headers, rows, numeric = []) {
  return h("table", {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, headers.map((name, i) => h("th", { scope: "col", class: numeric.includes(i) ? "num" : null }, name)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: headers.length }, "None yet."))));
}

function row(cells, numeric = [], attrs = {}) {
  return h("tr", attrs, cells.map((c, i) => (c instanceof Node && c.tagName === "TH" ? c : h("td", { class: numeric.includes(i) ? "num" : null }, c))));
}

function link(href, text) {
  return h("a", { href, "data-nav": true }, text);
}

function alertBox(text) {
  return h("div", { class: "alert", role: "alert" }, text);
}

function statusBadge(status) {
  return h("span", { class: `status status-${status}` }, status);
}

function announce(text) {
  const region = document.getElementById("announce");
  region.textContent = "";
  setTimeout(() => { region.textContent = text; }, 50);
}

// ---- formatting

const fmtInt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}
const fmtMs = (v) => (v === null || v === undefined ? "–" : `${Number(v).toPrecision(3)} ms`);
const fmtErr = (v) => (v === null || v === undefined ? "–" : Number(v) === 0 ? "0" : Number(v).toExponential(2));
const fmtX = (v) => (v === null || v === undefined ? "–" : `${Number(v).toFixed(2)}×`);
const fmtPct = (v) => `${Math.round((v || 0) * 100)}%`;
function fmtTime(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return h("time", { datetime: iso }, d.toLocaleString("en-GB", { year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" }));
}
const latencyOf = (c) => (c && c.latency_ms && typeof c.latency_ms === "object" ? c.latency_ms.median : c ? c.latency_ms : null);

// ---- the API

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function detailText(body, status) {
  const detail = body && body.detail;
  if (Array.isArray(detail)) return detail.map((d) => `${(d.loc || []).filter((p) => p !== "body").join(".")}: ${d.msg}`).join("; ");
  return detail ? String(detail) : `the server answered ${status}`;
}

async function api(path, { method = "GET", json, form, text = false, blob = false, probe = false } = {}) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(KEY) || ""}` };
  let body;
  if (json !== undefined) { headers["Content-Type"] = "application/json"; body = JSON.stringify(json); }
  if (form) body = form;
  let response;
  try {
    response = await fetch(path, { method, headers, body });
  } catch (err) {
    throw new ApiError(0, "the server cannot be reached; is agnitra serve running?");
  }
  if (!response.ok) {
    let parsed = null;
    try { parsed = await response.json(); } catch (err) { parsed = null; }
    if (response.status === 401 && !probe) signOut(`Signed out: ${detailText(parsed, 401)}`);
    throw new ApiError(response.status, detailText(parsed, response.status));
  }
  if (blob) return { blob: await response.blob(), name: fileName(response.headers.get("content-disposition")) };
  return text ? response.text() : response.json();
}

function fileName(disposition) {
  const found = /filename="?([^";]+)"?/.exec(disposition || "");
  return found ? found[1] : null;
}

let openapi = null;
async function serverHas(path) {
  // the server's own OpenAPI document says which optional endpoints (POST /v1/export) it has
  if (!openapi) openapi = fetch("/v1/openapi.json").then((r) => r.json()).catch(() => ({ paths: {} }));
  return Boolean(((await openapi).paths || {})[path]);
}

async function projectsById() {
  const projects = await api("/v1/projects");
  return { list: projects, byId: new Map(projects.map((p) => [p.id, p])) };
}

async function modelsById() {
  const models = await api("/v1/models?limit=500");
  return new Map(models.models.map((m) => [m.id, m]));
}

function saveFile(name, type, content) {
  const url = URL.createObjectURL(new Blob([content], { type }));
  const a = h("a", { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// ---- navigation: real links, handled here without reloading the page

let view = { alive: false, timers: [] };

function navigate(href, { replace = false } = {}) {
  if (replace) history.replaceState({}, "", href);
  else history.pushState({}, "", href);
  render(true);
}

document.addEventListener("click", (event) => {
  const a = event.target.closest && event.target.closest("a[data-nav]");
  if (!a || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  event.preventDefault();
  navigate(a.getAttribute("href"));
});
window.addEventListener("popstate", () => render(true));

const ROUTES = [
  [/^\/(ui\/?)?$/, "dashboard", dashboardPage],
  [/^\/ui\/projects\/?$/, "projects", projectsPage],
  [/^\/ui\/models\/?$/, "models", modelsPage],
  [/^\/ui\/models\/(\d+)\/?$/, "models", modelPage],
  [/^\/ui\/jobs\/?$/, "jobs", jobsPage],
  [/^\/ui\/jobs\/(\d+)\/?$/, "jobs", jobPage],
  [/^\/ui\/recipes\/?$/, "recipes", recipesPage],
  [/^\/ui\/audit\/?$/, "audit", auditPage],
];

async function render(moveFocus) {
  view.alive = false;
  view.timers.forEach(clearTimeout);
  const current = { alive: true, timers: [] };
  view = current;
  const main = document.getElementById("main");
  const signedIn = Boolean(sessionStorage.getItem(KEY));
  document.getElementById("nav").hidden = !signedIn;
  document.getElementById("signout").hidden = !signedIn;
  document.querySelector("[data-admin]").hidden = sessionStorage.getItem(ADMIN) !== "1";
  if (!signedIn) {
    main.replaceChildren(...flat([loginPage()]));
    document.title = "Sign in · Agnitra";
    if (moveFocus) main.querySelector("input").focus();
    return;
  }
  const path = location.pathname;
  const match = ROUTES.map(([re, name, page]) => [path.match(re), name, page]).find(([m]) => m);
  document.querySelectorAll("#nav a").forEach((a) => a.removeAttribute("aria-current"));
  if (!match) {
    main.replaceChildren(h("h1", { tabindex: "-1" }, "Not found"), h("p", {}, "No page here. ", link("/ui/", "Go to the dashboard"), "."));
    return;
  }
  const [m, name, page] = match;
  const navLink = document.querySelector(`#nav a[data-page="${name}"]`);
  if (navLink) navLink.setAttribute("aria-current", "page");
  main.replaceChildren(h("p", { class: "hint" }, "Loading…"));
  const ctx = {
    params: new URLSearchParams(location.search),
    alive: () => current.alive,
    later: (fn, ms) => current.timers.push(setTimeout(() => current.alive && fn(), ms)),
  };
  try {
    const content = await page(ctx, ...m.slice(1));
    if (!current.alive) return;
    main.replaceChildren(...flat([content]));
  } catch (err) {
    if (!current.alive) return;
    main.replaceChildren(h("h1", { tabindex: "-1" }, "Something went wrong"), alertBox(err.message));
  }
  const title = main.querySelector("h1");
  document.title = `${title ? title.textContent : "Agnitra"} · Agnitra`;
  if (moveFocus && title) {
    title.setAttribute("tabindex", "-1");
    title.focus();
  }
}

function signOut(why) {
  sessionStorage.removeItem(KEY);
  sessionStorage.removeItem(ADMIN);
  sessionStorage.setItem("agnitra.why", why || "");
  render(true);
}

// ---- sign in

function loginPage() {
  const why = sessionStorage.getItem("agnitra.why");
  sessionStorage.removeItem("agnitra.why");
  const input = h("input", { type: "password", name: "key", autocomplete: "off", required: true, size: 48, spellcheck: "false" });
  const error = h("div", { "aria-live": "assertive" }, why ? alertBox(why) : null);
  const button = h("button", { type: "submit" }, "Sign in");
  const form = h("form", { class: "panel", onsubmit: signIn },
    field("API key", input, "An agnitra key (agn_…): `agnitra keys create` makes one; `agnitra serve` shows the first admin key once. It is kept in this tab only."),
    h("div", { class: "actions" }, button), error);

  async function signIn(event) {
    event.preventDefault();
    button.disabled = true;
    sessionStorage.setItem(KEY, input.value.trim());
    try {
      await api("/v1/projects", { probe: true });
      let admin = "0";
      try { await api("/v1/audit/logs?limit=1", { probe: true }); admin = "1"; } catch (err) { admin = "0"; }
      sessionStorage.setItem(ADMIN, admin);
      render(true);
    } catch (err) {
      sessionStorage.removeItem(KEY);
      button.disabled = false;
      error.replaceChildren(alertBox(`The key was refused: ${err.message}`));
      input.focus();
    }
  }
  return [h("h1", {}, "Sign in"), h("p", { class: "lead" }, "Sign in with an API key to see projects, models and optimization jobs."), form];
}

// ---- dashboard

async function dashboardPage() {
  const [projects, models, recent, ...byStatus] = await Promise.all([
    api("/v1/projects"), api("/v1/models?limit=1"), api(`/v1/jobs?limit=5`),
    ...STATUSES.map((st) => api(`/v1/jobs?status=${st}&limit=1`)),
  ]);
  const names = await modelsById();
  const card = (label, count, href) => h("div", { class: "card" }, h("dt", {}, label), h("dd", {}, link(href, fmtInt(count))));
  return [
    h("h1", {}, "Dashboard"),
    h("p", { class: "lead" }, "What this key can see: projects, imported models and optimization jobs by status."),
    h("dl", { class: "cards", "aria-label": "Counts" },
      card("Projects", projects.length, "/ui/projects"),
      card("Models", models.total, "/ui/models"),
      STATUSES.map((st, i) => card(`Jobs ${st}`, byStatus[i].total, `/ui/jobs?status=${st}`))),
    h("h2", {}, "Latest jobs"),
    jobsTable("The five latest jobs", recent.jobs, names),
  ];
}

// ---- projects

async function projectsPage() {
  const { list } = await projectsById();
  const admin = sessionStorage.getItem(ADMIN) === "1";
  const rows = list.map((p) => row([h("th", { scope: "row" }, p.name), link(`/ui/models?project=${encodeURIComponent(p.name)}`, "Models"),
    link(`/ui/jobs?project=${encodeURIComponent(p.name)}`, "Jobs"), fmtTime(p.created_at)]));
  return [
    h("h1", {}, "Projects"),
    table(`${list.length} project(s)`, ["Name", "Models", "Jobs", "Created"], rows),
    admin ? newProjectForm() : h("p", { class: "hint" }, "Admin keys create projects."),
  ];
}

function newProjectForm() {
  const name = h("input", { name: "name", required: true, pattern: "[A-Za-z0-9][A-Za-z0-9._\\-]*", maxlength: 200 });
  const out = h("div", { "aria-live": "polite" });
  return h("form", {
    class: "panel", onsubmit: async (event) => {
      event.preventDefault();
      try {
        const made = await api("/v1/projects", { method: "POST", json: { name: name.value.trim() } });
        announce(`Project ${made.name} created`);
        navigate(`/ui/models?project=${encodeURIComponent(made.name)}`);
      } catch (err) {
        out.replaceChildren(alertBox(err.message));
      }
    },
  }, h("fieldset", {}, h("legend", {}, "New project"),
    h("div", { class: "fields" }, field("Project name", name, "Letters, digits, . _ -"), h("button", { type: "submit" }, "Create project"))), out);
}

// ---- models

function projectSelect(list, chosen, withAll) {
  const select = h("select", { name: "project", required: !withAll },
    withAll ? h("option", { value: "" }, "All projects") : null,
    list.map((p) => h("option", { value: p.name, selected: p.name === chosen }, p.name)));
  return select;
}

async function modelsPage(ctx) {
  const project = ctx.params.get("project") || "";
  const offset = Number(ctx.params.get("offset") || 0);
  const { list, byId } = await projectsById();
  const query = new URLSearchParams({ limit: PAGE, offset });
  if (project) query.set("project", project);
  const page = await api(`/v1/models?${query}`);
  const filter = projectSelect(list, project, true);
  filter.addEventListener("change", () => navigate(filter.value ? `/ui/models?project=${encodeURIComponent(filter.value)}` : "/ui/models", { replace: true }));
  const rows = page.models.map((m) => row([h("th", { scope: "row" }, link(`/ui/models/${m.id}`, m.name)), (byId.get(m.project_id) || {}).name || m.project_id, m.kind,
    fmtInt(m.summary && m.summary.params), fmtInt(m.summary && m.summary.nodes), fmtBytes(m.size_bytes), fmtTime(m.created_at)], [3, 4, 5]));
  return [
    h("h1", {}, "Models"),
    h("div", { class: "fields" }, field("Show the models of", filter)),
    table(`${page.total} model(s)${project ? ` in ${project}` : ""}`, ["Name", "Project", "Kind", "Parameters", "Graph nodes", "File size", "Imported"], rows, [3, 4, 5]),
    pager(page, "/ui/models", project ? { project } : {}),
    list.length ? [zooForm(list, project), uploadForm(list, project)] : h("p", { class: "note" }, "Create a project first (an admin key can), then import models into it."),
  ];
}

function pager(page, base, extra) {
  if (page.total <= page.limit) return null;
  const at = (offset) => `${base}?${new URLSearchParams({ ...extra, offset })}`;
  return h("nav", { class: "pager", "aria-label": "Pages" },
    page.offset > 0 ? link(at(Math.max(0, page.offset - page.limit)), "Newer") : null,
    h("span", {}, `${page.offset + 1}–${Math.min(page.total, page.offset + page.limit)} of ${page.total}`),
    page.offset + page.limit < page.total ? link(at(page.offset + page.limit), "Older") : null);
}

function optionsJson(textarea) {
  const text = textarea.value.trim();
  if (!text) return {};
  let parsed;
  try { parsed = JSON.parse(text); } catch (err) { throw new ApiError(0, `the options are not JSON: ${err.message}`); }
  if (typeof parsed !== "object" || Array.isArray(parsed) || parsed === null) throw new ApiError(0, 'the options are a JSON object, e.g. {"batch": 2}');
  return parsed;
}

function busyForm(form, button, out, waiting, work) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    out.replaceChildren(h("p", { class: "hint" }, waiting));
    try {
      await work();
    } catch (err) {
      out.replaceChildren(alertBox(err.message));
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

const IMPORTING = "Importing: the server reads the model's graph (a minute for a large model)…";

function zooForm(list, project) {
  const zoo = h("input", { name: "zoo", required: true, list: "zoo-names", placeholder: "bert-base", autocomplete: "off" });
  const name = h("input", { name: "name", required: true, maxlength: 200 });
  const size = h("select", { name: "size" }, ["", "full", "tiny", "small", "large"].map((v) => h("option", { value: v }, v || "default")));
  const batch = h("input", { name: "batch", type: "number", min: 1, step: 1, inputmode: "numeric" });
  const seq = h("input", { name: "seq_len", type: "number", min: 1, step: 1, inputmode: "numeric" });
  const more = h("textarea", { name: "options", rows: 1, placeholder: '{"dtype": "fp32"}' });
  const select = projectSelect(list, project, false);
  const button = h("button", { type: "submit" }, "Import");
  const out = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "panel" }, h("fieldset", {}, h("legend", {}, "Import a zoo model"),
    h("datalist", { id: "zoo-names" }, ZOO.map((z) => h("option", { value: z }))),
    h("div", { class: "fields" }, field("Project", select), field("Zoo model", zoo), field("Name", name), field("Size", size), field("Batch", batch),
      field("Sequence length", seq), field("Other options (JSON)", more), button)), out);
  zoo.addEventListener("change", () => { if (!name.value) name.value = zoo.value; });
  return busyForm(form, button, out, IMPORTING, async () => {
    const options = optionsJson(more);
    if (size.value) options.size = size.value;
    if (batch.value) options.batch = Number(batch.value);
    if (seq.value) options.seq_len = Number(seq.value);
    const made = await api("/v1/models/import", { method: "POST", json: { project: select.value, name: name.value.trim(), zoo: zoo.value.trim(), options } });
    announce(`Model ${made.name} imported`);
    navigate(`/ui/models/${made.id}`);
  });
}

function uploadForm(list, project) {
  const file = h("input", { name: "file", type: "file", required: true, accept: ".onnx,.pt2,.pt,.pth,.torchscript" });
  const name = h("input", { name: "name", required: true, maxlength: 200 });
  const more = h("textarea", { name: "options", rows: 1, placeholder: '{"input_shapes": ["2x8"]}' });
  const select = projectSelect(list, project, false);
  const button = h("button", { type: "submit" }, "Upload");
  const out = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "panel" }, h("fieldset", {}, h("legend", {}, "Upload a model file"),
    h("div", { class: "fields" }, field("Project", select), field("Model file", file, ".onnx, .pt2 or TorchScript; pickled files are refused"), field("Name", name),
      field("Options (JSON)", more, "TorchScript needs input_shapes"), button)), out);
  file.addEventListener("change", () => { if (!name.value && file.files[0]) name.value = file.files[0].name.replace(/\.[^.]+$/, ""); });
  return busyForm(form, button, out, IMPORTING, async () => {
    const body = new FormData();
    body.append("file", file.files[0]);
    body.append("project", select.value);
    body.append("name", name.value.trim());
    body.append("options", JSON.stringify(optionsJson(more)));
    const made = await api("/v1/models/import", { method: "POST", form: body });
    announce(`Model ${made.name} uploaded`);
    navigate(`/ui/models/${made.id}`);
  });
}

async function modelPage(ctx, id) {
  const model = await api(`/v1/models/${id}`);
  const { byId } = await projectsById();
  const project = byId.get(model.project_id);
  const summary = model.summary || {};
  const workload = summary.workload || {};
  const jobs = project ? (await api(`/v1/jobs?project=${encodeURIComponent(project.name)}&limit=100`)).jobs.filter((j) => j.model_id === model.id) : [];
  const facts = [
    ["Project", project ? link(`/ui/models?project=${encodeURIComponent(project.name)}`, project.name) : model.project_id],
    ["Kind", model.kind], ["Workload", [workload.name, workload.task, workload.dtype, workload.weights && `${workload.weights} weights`].filter(Boolean).join(" · ") || "–"],
    ["Options", Object.keys(model.options || {}).length ? h("code", {}, JSON.stringify(model.options)) : "none"],
    ["File size", fmtBytes(model.size_bytes)], ["SHA-256", model.sha256 ? h("code", {}, model.sha256.slice(0, 16) + "…") : "–"], ["Imported", fmtTime(model.created_at)],
  ];
  const graph = [["Graph nodes", fmtInt(summary.nodes)], ["Parameters", fmtInt(summary.params)], ["Captured with", summary.source || "–"], ["Graph breaks", fmtInt(summary.graph_breaks)]];
  return [
    h("h1", {}, model.name),
    h("p", { class: "lead" }, `Model #${model.id}`),
    factList(facts),
    h("h2", {}, "Graph summary"),
    factList(graph),
    h("h3", {}, "Op mix"),
    opMix(model.name, summary.op_mix || {}),
    hotspots(summary),
    h("h2", {}, "Optimize"),
    jobForm(model),
    h("h2", {}, "Jobs of this model"),
    jobsTable(`${jobs.length} job(s)`, jobs, new Map([[model.id, model]])),
  ];
}

function factList(pairs) {
  return h("dl", { class: "facts" }, pairs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function opMix(modelName, mix) {
  const kinds = Object.entries(mix).sort((a, b) => (b[1].flops_share || 0) - (a[1].flops_share || 0) || b[1].count - a[1].count);
  if (!kinds.length) return h("p", { class: "hint" }, "The import recorded no op mix.");
  const titleId = nextId("t"), descId = nextId("d");
  const text = kinds.map(([k, v]) => `${k}: ${v.count} node(s), ${fmtPct(v.flops_share)} of FLOPs`).join("; ");
  const W = 640, left = 120, right = 110, bar = 20, gap = 8, top = 10;
  const H = top * 2 + kinds.length * (bar + gap);
  const scale = (W - left - right);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-labelledby": `${titleId} ${descId}`, class: "opmix" },
    s("title", { id: titleId }, `Op mix of ${modelName}: share of FLOPs by op kind`),
    s("desc", { id: descId }, text),
    kinds.map(([k, v], i) => {
      const y = top + i * (bar + gap);
      const w = Math.max(1, (v.flops_share || 0) * scale);
      return s("g", { "data-kind": k },
        s("text", { x: left - 8, y: y + bar * 0.7, "text-anchor": "end" }, k),
        s("rect", { class: "bar", x: left, y, width: w, height: bar, rx: 2 }),
        s("text", { x: left + w + 6, y: y + bar * 0.7 }, `${fmtPct(v.flops_share)} · ${v.count} node(s)`));
    }));
  const rows = kinds.map(([k, v]) => row([h("th", { scope: "row" }, k), fmtInt(v.count), fmtPct(v.flops_share)], [1, 2]));
  return [h("figure", { class: "chart" }, svg, h("figcaption", { class: "hint" }, "Bars: share of the model's FLOPs; labels: FLOP share and node count.")),
    table("The op mix as a table", ["Op kind", "Nodes", "Share of FLOPs"], rows, [1, 2])];
}

function hotspots(summary) {
  const spots = summary.hotspots;
  if (!Array.isArray(spots) || !spots.length) {
    return h("p", { class: "hint" }, "Hotspots (time per module) are measured in a job's run: the import reads the graph without timing it.");
  }
  const rows = spots.map((hs) => row([hs.module || hs.name || "–", hs.kind || hs.roofline || "–", fmtPct(hs.time_share || hs.share)], [2]));
  return [h("h3", {}, "Hotspots"), table("Hotspots", ["Module", "Class", "Time share"], rows, [2])];
}

function jobForm(model) {
  const type = h("select", { name: "type" }, h("option", { value: "schedule" }, "schedule (search every transform)"), h("option", { value: "quant" }, "quant (quantization recipes)"));
  const objective = h("select", { name: "objective" }, OBJECTIVES.map((o) => h("option", { value: o }, o)));
  const budget = h("input", { name: "budget", value: "10m", required: true, size: 8 });
  const maxError = h("input", { name: "max_error", type: "number", step: "any", min: 0, placeholder: "workload default" });
  const transforms = h("input", { name: "transforms", placeholder: "all", size: 28 });
  const peers = h("input", { name: "peers", type: "checkbox", checked: true });
  const button = h("button", { type: "submit" }, "Start job");
  const out = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "panel" }, h("fieldset", {}, h("legend", {}, `Start an optimization job on ${model.name}`),
    h("div", { class: "fields" }, field("Job type", type), field("Objective", objective), field("Budget", budget, "e.g. 90s, 10m"),
      field("Max error", maxError), field("Transforms", transforms, "comma-separated; empty: all"), checkbox("Compare with torch.compile and ONNX Runtime", peers), button)), out);
  return busyForm(form, button, out, "Submitting…", async () => {
    const settings = { budget: budget.value.trim(), objective: objective.value };
    const names = transforms.value.split(",").map((t) => t.trim()).filter(Boolean);
    if (names.length) settings.transforms = names;
    if (!peers.checked) settings.peers = [];
    if (maxError.value) settings.max_error = Number(maxError.value);
    const job = await api("/v1/jobs/optimize", { method: "POST", json: { model_id: model.id, type: type.value, settings } });
    announce(`Job ${job.id} queued`);
    navigate(`/ui/jobs/${job.id}`);
  });
}

// ---- jobs

function progressCell(job) {
  return h("span", {}, h("progress", { max: 1, value: job.progress || 0, "aria-label": `Job ${job.id} progress` }), " ", h("span", { class: "pct" }, fmtPct(job.progress)));
}

const jobResult = (job) => (job.outcome ? `${fmtX(job.outcome.speedup)}${job.outcome.chosen ? ` · ${job.outcome.chosen}` : ""}` : job.error ? job.error.slice(0, 80) : "–");
const wrap = (text) => h("div", { class: "wrap" }, text);

function jobRow(job, models) {
  const model = models.get(job.model_id);
  return row([h("th", { scope: "row" }, link(`/ui/jobs/${job.id}`, `#${job.id}`)), model ? link(`/ui/models/${model.id}`, model.name) : `model ${job.model_id}`,
    job.type, statusBadge(job.status), progressCell(job), fmtTime(job.created_at), wrap(jobResult(job))], [], { id: `job-row-${job.id}`, "data-status": job.status });
}

function updateJobRow(tr, job) {
  // only the changing cells are redrawn: focus on the row's links stays where it is
  const cells = tr.children;
  tr.dataset.status = job.status;
  cells[3].replaceChildren(statusBadge(job.status));
  cells[4].querySelector("progress").value = job.progress || 0;
  cells[4].querySelector(".pct").textContent = fmtPct(job.progress);
  cells[6].firstChild.textContent = jobResult(job);
}

function jobsTable(caption, jobs, models) {
  const t = table(caption, ["Job", "Model", "Type", "Status", "Progress", "Created", "Result"], jobs.map((j) => jobRow(j, models)));
  return t;
}

function watchJobs(ctx, container, jobs) {
  // follows each unfinished job (GET /v1/jobs/{id}) and redraws its row; finished ones are announced
  const open = new Map(jobs.filter((j) => !FINISHED.has(j.status)).slice(0, 20).map((j) => [j.id, j.status]));
  const tick = async () => {
    for (const [id, before] of [...open]) {
      let job;
      try { job = await api(`/v1/jobs/${id}`); } catch (err) { continue; }
      if (!ctx.alive()) return;
      const tr = container.querySelector(`#job-row-${id}`);
      if (tr) updateJobRow(tr, job);
      if (job.status !== before) announce(`Job ${id} is ${job.status}`);
      if (FINISHED.has(job.status)) open.delete(id);
      else open.set(id, job.status);
    }
    if (open.size) ctx.later(tick, POLL_MS);
  };
  if (open.size) ctx.later(tick, POLL_MS);
}

async function jobsPage(ctx) {
  const project = ctx.params.get("project") || "";
  const status = ctx.params.get("status") || "";
  const offset = Number(ctx.params.get("offset") || 0);
  const query = new URLSearchParams({ limit: PAGE, offset });
  if (project) query.set("project", project);
  if (status) query.set("status", status);
  const [{ list }, page, models] = await Promise.all([projectsById(), api(`/v1/jobs?${query}`), modelsById()]);
  const projectFilter = projectSelect(list, project, true);
  const statusFilter = h("select", { name: "status" }, h("option", { value: "" }, "Any status"), STATUSES.map((st) => h("option", { value: st, selected: st === status }, st)));
  const refilter = () => {
    const q = new URLSearchParams();
    if (projectFilter.value) q.set("project", projectFilter.value);
    if (statusFilter.value) q.set("status", statusFilter.value);
    navigate(`/ui/jobs${q.toString() ? `?${q}` : ""}`, { replace: true });
  };
  projectFilter.addEventListener("change", refilter);
  statusFilter.addEventListener("change", refilter);
  const container = h("div", {}, jobsTable(`${page.total} job(s)`, page.jobs, models));
  watchJobs(ctx, container, page.jobs);
  const extra = {};
  if (project) extra.project = project;
  if (status) extra.status = status;
  return [
    h("h1", {}, "Jobs"),
    h("p", { class: "lead" }, "Optimization jobs, newest first; running ones update here as they progress. Start a job from a model's page."),
    h("div", { class: "fields" }, field("Project", projectFilter), field("Status", statusFilter)),
    container,
    pager(page, "/ui/jobs", extra),
  ];
}

async function jobPage(ctx, id) {
  let job = await api(`/v1/jobs/${id}`);
  const [model, { byId }] = await Promise.all([api(`/v1/models/${job.model_id}`).catch(() => null), projectsById()]);
  const project = byId.get(job.project_id);
  const state = h("div", { class: "jobstate", role: "status", "aria-live": "polite", "aria-atomic": "true", id: "job-state" });
  const bar = h("progress", { max: 1, value: 0, "aria-label": "Job progress", id: "job-progress" });
  const events = h("ol", { class: "events", "aria-label": "Events", tabindex: "0" });
  const actions = h("div", { class: "actions" });
  const facts = h("div", {});
  const results = h("div", { id: "job-results" });

  const draw = () => {
    const last = (job.events || []).at(-1);
    state.replaceChildren(h("span", {}, "Status: "), statusBadge(job.status), h("span", { class: "pct" }, fmtPct(job.progress)), last ? h("span", { class: "hint", id: "job-last" }, last.message) : null);
    bar.value = job.progress || 0;
    if (events.childElementCount !== (job.events || []).length) {
      events.replaceChildren(...(job.events || []).map((e) => h("li", {}, fmtTime(e.at), e.message)));
      events.scrollTop = events.scrollHeight;
    }
    facts.replaceChildren(factList([["Settings", h("code", {}, JSON.stringify(job.settings))], ["Attempts", String(job.attempts)], ["Created", fmtTime(job.created_at)],
      ["Started", fmtTime(job.started_at)], ["Finished", fmtTime(job.finished_at)]]));
    actions.replaceChildren(FINISHED.has(job.status) ? [] : h("button", { type: "button", class: "secondary", onclick: cancel }, "Cancel job"));
  };
  const cancel = async () => {
    try { job = await api(`/v1/jobs/${id}/cancel`, { method: "POST" }); announce(`Cancelling job ${id}`); } catch (err) { actions.append(alertBox(err.message)); }
  };
  const finish = async () => {
    if (job.status === "failed") results.replaceChildren(h("h2", {}, "Why it failed"), alertBox(job.error || "no reason was recorded"));
    else if (job.status === "done") results.replaceChildren(...flat([await outcome(job, model)]));
    else results.replaceChildren(h("p", { class: "note" }, `The job was ${job.status}.`));
  };
  const poll = async () => {
    try {
      const before = job.status;
      job = await api(`/v1/jobs/${id}`);
      if (!ctx.alive()) return;
      draw();
      if (before !== job.status) announce(`Job ${id} is ${job.status}`);
      if (FINISHED.has(job.status)) return finish();
    } catch (err) {
      if (!ctx.alive()) return;
    }
    ctx.later(poll, POLL_MS);
  };
  draw();
  if (FINISHED.has(job.status)) await finish();
  else ctx.later(poll, POLL_MS);
  return [
    h("h1", {}, `Job #${job.id}`),
    h("p", { class: "lead" }, `${job.type} job on `, model ? link(`/ui/models/${model.id}`, model.name) : `model ${job.model_id}`, project ? ` in ${project.name}` : ""),
    h("div", { class: "panel jobpanel" }, bar, state), actions, facts,
    h("h2", {}, "Events"), events,
    results,
  ];
}

async function outcome(job, model) {
  const out = job.outcome || {};
  const count = Math.min(out.candidates || 0, 200);
  const [pareto, candidates] = await Promise.all([
    api(`/v1/pareto/${job.id}`),
    Promise.all([...Array(count).keys()].map((i) => api(`/v1/candidates/${job.id}-${i}`).catch(() => null))),
  ]);
  const recipe = out.recipe || { version: "agnitra.recipe/1", steps: [] };
  const exporting = await serverHas("/v1/export");
  const exportOut = h("div", { "aria-live": "polite" });
  const exportAs = async (format, button) => {
    button.disabled = true;
    exportOut.replaceChildren(h("p", { class: "hint" }, `Exporting as ${format}…`));
    try {
      const file = await api("/v1/export", { method: "POST", json: { job_id: job.id, format }, blob: true });
      saveFile(format === "recipe" ? `recipe-job-${job.id}.json` : file.name || `job-${job.id}.${format}`, file.blob.type, file.blob);
      exportOut.replaceChildren(h("p", { class: "hint" }, `Saved the ${format === "recipe" ? "recipe" : `.${format} model`} (POST /v1/export).`));
    } catch (err) {
      exportOut.replaceChildren(alertBox(err.message));
    } finally {
      button.disabled = false;
    }
  };
  const recipeButton = h("button", { type: "button" }, "Download recipe JSON");
  recipeButton.addEventListener("click", () => (exporting ? exportAs("recipe", recipeButton)
    : saveFile(`recipe-job-${job.id}.json`, "application/json", JSON.stringify(recipe, null, 2) + "\n")));
  const modelButtons = exporting ? ["onnx", "pt2"].map((format) => {
    const button = h("button", { type: "button", class: "secondary" }, `Export model (.${format})`);
    button.addEventListener("click", () => exportAs(format, button));
    return button;
  }) : [];
  return [
    h("h2", {}, "Outcome"),
    h("p", { id: "verdict" }, out.verdict || "–"),
    factList([["Speedup", fmtX(out.speedup)], ["Chosen recipe", out.chosen || "none: the original model"], ["Candidates measured", String(out.candidates || 0)]]),
    h("div", { class: "actions" },
      h("button", { type: "button", onclick: () => api(`/v1/pareto/${job.id}?format=csv`, { text: true }).then((csv) => saveFile(`pareto-job-${job.id}.csv`, "text/csv", csv), (err) => exportOut.replaceChildren(alertBox(err.message))) }, "Download Pareto CSV"),
      recipeButton, modelButtons),
    exportOut,
    h("h2", {}, "Pareto front"),
    paretoChart(pareto.points, out.chosen),
    h("h2", {}, "Candidates"),
    candidatesTable(candidates.filter(Boolean), out.chosen),
    h("h2", {}, "Chosen recipe"),
    recipeSection(recipe, out.chosen, model),
  ];
}

function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo)) { hi = lo + (lo ? Math.abs(lo) : 1); }
  const raw = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => st >= raw);
  const start = Math.floor(lo / step) * step, ticks = [];
  for (let v = start; v <= hi + step * 0.5; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

function paretoChart(points, chosen) {
  const plotted = points.filter((p) => p.latency_ms !== null && p.latency_ms !== undefined && p.error !== null && p.error !== undefined);
  if (!plotted.length) {
    return h("p", { class: "note", id: "pareto-summary" }, points.length ? "No candidate has both a latency and an error to plot." : "No candidate was measured: there is nothing to plot.");
  }
  const front = plotted.filter((p) => p.on_front);
  const fastest = plotted.reduce((a, b) => (b.latency_ms < a.latency_ms ? b : a));
  const summary = `${plotted.length} measured candidate(s), ${front.length} on the Pareto front. Fastest: ${fastest.name} at ${fmtMs(fastest.latency_ms)} with error ${fmtErr(fastest.error)}. Marker size: the model's memory.`;
  const W = 760, H = 380, m = { l: 70, r: 170, t: 20, b: 50 };
  const xs = niceTicks(Math.min(...plotted.map((p) => p.latency_ms)) * 0.95, Math.max(...plotted.map((p) => p.latency_ms)) * 1.05);
  const ys = niceTicks(0, Math.max(...plotted.map((p) => p.error)) * 1.1 || 1e-6);
  const x = (v) => m.l + ((v - xs[0]) / (xs.at(-1) - xs[0])) * (W - m.l - m.r);
  const y = (v) => H - m.b - ((v - ys[0]) / (ys.at(-1) - ys[0])) * (H - m.t - m.b);
  const mems = plotted.map((p) => p.memory_bytes).filter((v) => v);
  const memMax = mems.length ? Math.max(...mems) : 0;
  const radius = (p) => (p.memory_bytes && memMax ? 4 + 10 * Math.sqrt(p.memory_bytes / memMax) : 6);
  const titleId = nextId("t"), descId = nextId("d");
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-labelledby": `${titleId} ${descId}`, id: "pareto-chart" },
    s("title", { id: titleId }, "Pareto plot: latency against error, marker size by memory"),
    s("desc", { id: descId }, summary),
    s("g", { class: "axis" },
      xs.map((v) => [s("line", { class: "grid", x1: x(v), x2: x(v), y1: m.t, y2: H - m.b }), s("text", { x: x(v), y: H - m.b + 16, "text-anchor": "middle" }, Number(v.toPrecision(4)))]),
      ys.map((v) => [s("line", { class: "grid", x1: m.l, x2: W - m.r, y1: y(v), y2: y(v) }), s("text", { x: m.l - 6, y: y(v) + 4, "text-anchor": "end" }, fmtErr(v))]),
      s("line", { x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b }), s("line", { x1: m.l, x2: m.l, y1: m.t, y2: H - m.b }),
      s("text", { x: (m.l + W - m.r) / 2, y: H - 10, "text-anchor": "middle" }, "latency, median (ms) →"),
      s("text", { x: 14, y: (m.t + H - m.b) / 2, "text-anchor": "middle", transform: `rotate(-90 14 ${(m.t + H - m.b) / 2})` }, "error (lower is better) →")),
    s("g", { class: "points" }, plotted.slice().sort((a, b) => radius(b) - radius(a)).map((p) =>
      s("circle", { class: `point${p.on_front ? " front" : ""}${p.name === chosen ? " chosen" : ""}`, cx: x(p.latency_ms), cy: y(p.error), r: radius(p), "data-candidate": p.candidate },
        s("title", {}, `${p.name}: ${fmtMs(p.latency_ms)}, error ${fmtErr(p.error)}, memory ${fmtBytes(p.memory_bytes)}${p.on_front ? ", on the front" : ""}`)))),
    s("g", { class: "legend", transform: `translate(${W - m.r + 16} ${m.t + 4})` },
      [["point front", "on the Pareto front"], ["point", "dominated"], ["point chosen", "chosen"]].map(([cls, label], i) =>
        [s("circle", { class: cls, cx: 8, cy: 8 + i * 18, r: 6 }), s("text", { x: 20, y: 12 + i * 18 }, label)])));
  return [h("figure", { class: "chart" }, svg, h("figcaption", { id: "pareto-summary" }, summary))];
}

function candidatesTable(candidates, chosen) {
  const rows = candidates.map((c) => {
    const corr = c.correctness || {};
    return row([h("th", { scope: "row" }, c.id), wrap(c.name), c.peer ? `peer: ${c.peer}` : "search", c.status, fmtMs(latencyOf(c)), fmtX(c.speedup),
      corr.value === undefined ? "–" : `${fmtErr(corr.value)} (${corr.metric})`, corr.passed === undefined ? "–" : corr.passed ? "yes" : "no", fmtBytes(c.model_bytes), wrap(c.reason || "")],
    [4, 5, 8], { class: c.name === chosen ? "chosen" : null });
  });
  return table(`${candidates.length} candidate(s)`, ["Candidate", "Recipe", "From", "Status", "Latency", "Speedup", "Error", "Verified", "Model memory", "Reason"], rows, [4, 5, 8]);
}

const FLAGS = { batch: "--batch", seq_len: "--seq-len", tokens: "--tokens", dtype: "--dtype", size: "--size", task: "--task" };
const SUFFIX = { onnx: "onnx", pt2: "pt2", torchscript: "pt" };

function modelSpec(model) {
  if (!model) return { cli: "MODEL", sdk: '"MODEL"', kwargs: [] };
  const source = model.kind === "zoo" ? ((model.summary || {}).workload || {}).source || `zoo:${model.name}` : `path/to/${model.name}.${SUFFIX[model.kind] || "onnx"}`;
  const opts = model.options || {};
  const cli = [source];
  const kwargs = [];
  for (const [k, v] of Object.entries(opts)) {
    if (k === "input_shapes") (Array.isArray(v) ? v : [v]).forEach((shape) => cli.push("--input-shape", shape));
    else if (FLAGS[k]) cli.push(FLAGS[k], String(v));
    kwargs.push(`${k}=${JSON.stringify(v)}`);
  }
  return { cli: cli.join(" "), sdk: JSON.stringify(source), kwargs };
}

function snippet(label, code) {
  const pre = h("pre", { tabindex: "0", "aria-label": label }, h("code", {}, code));
  const done = h("span", { class: "hint", "aria-live": "polite" });
  const copy = async () => {
    try { await navigator.clipboard.writeText(code); } catch (err) {
      const range = document.createRange(); range.selectNodeContents(pre); const sel = getSelection(); sel.removeAllRanges(); sel.addRange(range); document.execCommand("copy");
    }
    done.textContent = "Copied.";
  };
  return h("div", { class: "snippet" }, h("div", { class: "head" }, h("h3", {}, label), h("span", {}, done, " ", h("button", { type: "button", class: "secondary", onclick: copy, "aria-label": `Copy the ${label}` }, "Copy"))), pre);
}

function recipeSection(recipe, chosen, model) {
  const steps = recipe.steps || [];
  const json = h("pre", { tabindex: "0", "aria-label": "recipe.json" }, h("code", {}, JSON.stringify(recipe, null, 2)));
  if (!steps.length) {
    return [h("p", { class: "note" }, "No recipe beat the original model with correct outputs: the answer is the original model, and there is nothing to apply."), json];
  }
  const spec = modelSpec(model);
  const cli = `# recipe.json: the "Download recipe JSON" file\nagnitra bench ${spec.cli} --variants eager --recipe recipe.json`;
  const sdk = `import agnitra\n\nfast = agnitra.apply(${[spec.sdk, '"recipe.json"', ...spec.kwargs].join(", ")})\nprint(fast.recipe.name)  # ${chosen || steps.map((st) => st.transform).join(" + ")}`;
  return [
    h("ol", { "aria-label": "Recipe steps" }, steps.map((st) => h("li", {}, h("code", {}, st.transform), Object.keys(st.params || {}).length ? ` ${JSON.stringify(st.params)}` : ""))),
    json, snippet("CLI snippet", cli), snippet("SDK snippet", sdk),
  ];
}

// ---- recipes and audit log

async function recipesPage() {
  const [page, models] = await Promise.all([api("/v1/jobs?status=done&limit=100"), modelsById()]);
  const rows = page.jobs.filter((j) => j.outcome).map((j) => {
    const model = models.get(j.model_id);
    const recipe = j.outcome.recipe || {};
    return row([h("th", { scope: "row" }, link(`/ui/jobs/${j.id}`, `#${j.id}`)), model ? link(`/ui/models/${model.id}`, model.name) : `model ${j.model_id}`,
      wrap(j.outcome.chosen || "none: the original model"), fmtX(j.outcome.speedup), fmtTime(j.finished_at),
      h("button", { type: "button", class: "secondary", "aria-label": `Download the recipe of job ${j.id}`, onclick: () => saveFile(`recipe-job-${j.id}.json`, "application/json", JSON.stringify(recipe, null, 2) + "\n") }, "Download JSON")], [3]);
  });
  return [
    h("h1", {}, "Recipes"),
    h("p", { class: "lead" }, "The recipe each finished job chose (the latest 100 jobs)."),
    table(`${rows.length} recipe(s)`, ["Job", "Model", "Chosen recipe", "Speedup", "Finished", "recipe.json"], rows, [3]),
  ];
}

async function auditPage(ctx) {
  const offset = Number(ctx.params.get("offset") || 0);
  let entries;
  try {
    entries = await api(`/v1/audit/logs?limit=${PAGE + 1}&offset=${offset}`);
  } catch (err) {
    if (err.status === 403) return [h("h1", {}, "Audit log"), alertBox(`Only admin keys read the audit log: ${err.message}`)];
    throw err;
  }
  const more = entries.length > PAGE;
  const rows = entries.slice(0, PAGE).map((e) => row([fmtTime(e.at), e.actor || (e.key !== null && e.key !== undefined ? `key:${e.key}` : "server"), h("code", {}, e.action), e.target,
    h("code", {}, JSON.stringify(e.detail || {}))]));
  return [
    h("h1", {}, "Audit log"),
    h("p", { class: "lead" }, "Every change, newest first."),
    table("Audit entries", ["When", "Who", "Action", "Target", "Detail"], rows),
    h("nav", { class: "pager", "aria-label": "Pages" },
      offset > 0 ? link(`/ui/audit?offset=${Math.max(0, offset - PAGE)}`, "Newer") : null,
      more ? link(`/ui/audit?offset=${offset + PAGE}`, "Older") : null),
  ];
}

// ---- start

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("signout").addEventListener("click", () => signOut(""));
  document.querySelector(".skip").addEventListener("click", (event) => {
    event.preventDefault();  // focus moves without a #main in the address (which would redraw the page)
    document.getElementById("main").focus();
  });
  render(false);
});
