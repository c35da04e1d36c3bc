// ax dashboard: a small hash-routed page over the dashboard's JSON API
// (/api/...), which calls ax's management API. No build step, no library.
"use strict";

const main = document.getElementById("main");
const colors = ["#2f6fde", "#2e9d57", "#d69e12", "#9b51e0", "#c62f2f"];
const state = { allow: false, history: [], overview: null, live: null };

// h builds an element: h("td", {class: "num"}, "text", child, ...).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path, opts) {
  const res = await fetch(path, opts);
  const body = await res.json().catch(() => ({ message: res.statusText }));
  if (!res.ok) throw new Error(`${res.status}: ${body.message || res.statusText}`);
  return body;
}

function toast(msg, error) {
  const t = document.getElementById("toast");
  t.textContent = msg;
  t.className = error ? "toast error" : "toast";
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, error ? 12000 : 5000);
}

// ask shows the confirmation dialog and resolves to true on Confirm.
function ask(text) {
  const dlg = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok"), { once: true });
    dlg.returnValue = "";
    dlg.showModal();
  });
}

// takeToken keeps the action token the dashboard printed (…/#token=…) for
// this tab and removes it from the address bar.
function takeToken() {
  const m = location.hash.match(/^#token=([0-9A-Za-z_-]+)/);
  if (!m) return;
  sessionStorage.setItem("ax-token", m[1]);
  history.replaceState(null, "", location.pathname + location.search + "#/");
}

// post sends an action with the confirmation and token headers the server
// requires; it resolves to the reply, or null after showing the error.
async function post(verb, body) {
  try {
    return await api(`/api/actions/${verb}`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Ax-Confirm": "yes", "X-Ax-Token": sessionStorage.getItem("ax-token") || "" },
      body: JSON.stringify(body),
    });
  } catch (e) { toast(e.message, true); return null; }
}

// confirmAction asks the operator, then posts the action.
async function confirmAction(text, verb, body) {
  return (await ask(text)) ? post(verb, body) : null;
}

function actionButton(label, attrs, onclick) {
  const b = h("button", Object.assign({ type: "button", onclick }, attrs), label);
  if (!state.allow) { b.disabled = true; b.title = "read-only: start the dashboard with --allow-actions"; }
  else if (attrs.title) b.disabled = true;
  return b;
}

const fmtTime = (s) => (s ? new Date(s).toLocaleString() : "");
const fmtRate = (n) => (n ? n.toFixed(n < 10 ? 2 : 0) : "0");
// fmtDur shortens a Go duration ("1.355744ms" -> "1.36ms").
const fmtDur = (d) => String(d || "").replace(/(\d+\.\d{2})\d+/g, "$1");
const badge = (s) => h("span", { class: `badge ${s}` }, s);
// A task id belongs to its tenant: a task's page names both. taskHash is
// the link of a task's page (docs/DASHBOARD.md, "Links").
const taskHash = (id, tenant) => `#/task/${encodeURIComponent(id)}?tenant=${encodeURIComponent(tenant)}`;
const taskLink = (id, tenant) => h("a", { href: taskHash(id, tenant),
  "data-task-link": id, "data-tenant": tenant }, id);

// niceMax rounds an axis top up to 2, 4 or 10 times a power of ten (at
// least 2), so that its half is a round number too: an axis of small counts
// reads 0, 1, 2, not 0, 1, 1.
const niceMax = (v) => {
  const p = 10 ** Math.floor(Math.log10(Math.max(v, 1)));
  for (const m of [1, 2, 4, 10]) if (m * p >= v && m * p >= 2) return m * p;
  return 10 * p;
};

// chart draws series (arrays of numbers, one per priority) over times as
// SVG polylines, with the y axis from 0 to a round number at or above the
// largest value.
function chart(title, times, series, fmt) {
  const W = 600, H = 180, L = 44, B = 18;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const el = (tag, attrs) => {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    svg.append(e);
    return e;
  };
  const top = Math.max(...series.flat(), 0);
  const max = Number.isInteger(top) ? niceMax(top) : top || 1;
  const n = times.length;
  const x = (i) => L + (n < 2 ? 0 : (i * (W - L - 4)) / (n - 1));
  const y = (v) => H - B - (v / max) * (H - B - 8);
  for (const f of [0, 0.5, 1]) {
    el("line", { x1: L, x2: W, y1: y(max * f), y2: y(max * f), stroke: "#e3e6ec" });
    el("text", { x: L - 4, y: y(max * f) + 4, "text-anchor": "end", "font-size": 10, fill: "#6b7384" }).textContent = fmt(max * f);
  }
  if (n > 1) {
    const secs = Math.round((new Date(times[n - 1]) - new Date(times[0])) / 1000);
    el("text", { x: L, y: H - 4, "font-size": 10, fill: "#6b7384" }).textContent = `${secs}s ago`;
    el("text", { x: W - 4, y: H - 4, "text-anchor": "end", "font-size": 10, fill: "#6b7384" }).textContent = "now";
  }
  series.forEach((values, p) => {
    if (!values.some((v) => v > 0)) return;
    el("polyline", { fill: "none", stroke: colors[p], "stroke-width": 2,
      points: values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ") });
  });
  const legend = h("div", { class: "legend" }, [0, 1, 2, 3, 4].map((p) => h("span", {}, h("i", { class: `p${p}` }), `p${p}`)));
  return h("div", { class: "chart" }, h("h3", {}, title), svg, legend);
}

// lostCount is the reconciler's total of lost tasks found (re-published and
// buried), or "–" before a leader reported.
function lostCount(r) {
  if (!r) return "–";
  const sum = (m) => Object.values(m || {}).reduce((a, b) => a + b, 0);
  return sum(r.republished) + sum(r.dead);
}

function lostTitle(r) {
  if (!r) return "no reconciler report yet";
  const list = (m) => Object.entries(m || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "0";
  return `re-published: ${list(r.republished)}; buried DEAD "message lost": ${list(r.dead)}; ${r.tracked} records tracked`;
}

// rejectedTitle explains the leader's count of mistyped submit subjects.
function rejectedTitle(r) {
  if (!r) return "no report yet (no leader has run the watch)";
  const by = Object.entries(r.by_reason || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "none";
  const last = (r.recent || []).slice(-5).map((x) => x.subject).join(", ");
  return `messages no bucket stored (a wrong token count or priority), by reason: ${by}` +
    (last ? `; last: ${last}` : "") + "; `ax rejects` samples every shape";
}

function renderOverview() {
  const ov = state.overview;
  if (!ov) return;
  const out = [];
  if (ov.error) out.push(h("p", { class: "err" }, ov.error));
  const s = ov.stats;
  if (s) {
    out.push(h("div", { class: "cards" },
      h("div", { class: "card" }, "Task records", h("b", { id: "records" }, s.records)),
      h("div", { class: "card" }, "Dead letters", h("b", {}, h("a", { href: "#/dlq" }, s.dlq))),
      h("div", { class: "card", title: lostTitle(s.reconciler) }, "Lost tasks repaired", h("b", { id: "lost-repaired" }, lostCount(s.reconciler))),
      h("div", { class: "card", title: rejectedTitle(s.rejects) }, "Rejected submits", h("b", { id: "rejected-submits" }, s.rejects ? s.rejects.total : "–")),
      ...Object.entries(s.states || {}).sort().map(([k, v]) => h("div", { class: "card" }, badge(k), h("b", {}, v)))));
    const levels = Object.fromEntries((ov.levels || []).map((l) => [l.priority, l]));
    out.push(h("h2", {}, `Priority buckets `, h("small", { class: "muted" },
      `rates and run times over the last ${s.window}; pressure ${ov.leader ? "from the leader" : "from depth / capacity (alert 60 %, refuse 80 %, pause 95 %)"}`
      + (ov.dispatch_paused ? "; p3–p4 dispatch PAUSED" : ""))));
    out.push(h("table", { id: "buckets" },
      h("tr", {}, ["bucket", "depth", "capacity", "fill", "in flight", "submitted/s", "succeeded/s", "dead/s", "p50", "p99", "timeout", "pressure"]
        .map((c, i) => h("th", { class: i && i < 8 ? "num" : null }, c))),
      s.buckets.map((b) => {
        const l = levels[b.priority] || { fill: 0, level: "ok" };
        return h("tr", { "data-bucket": b.priority },
          h("td", {}, `p${b.priority}`), h("td", { class: "num" }, b.depth), h("td", { class: "num" }, b.capacity),
          h("td", { class: "num" }, h("progress", { max: 1, value: Math.min(1, l.fill) }), ` ${(l.fill * 100).toFixed(1)} %`),
          h("td", { class: "num" }, b.in_flight), h("td", { class: "num" }, fmtRate(b.submitted_per_s)),
          h("td", { class: "num" }, fmtRate(b.succeeded_per_s)), h("td", { class: "num" }, fmtRate(b.dead_per_s)),
          ...(b.samples ? [b.p50, b.p99, b.recommended_timeout] : ["–", "–", "–"]).map((v) => h("td", {}, fmtDur(v))),
          h("td", {}, h("span", { class: `badge ${l.level}` }, l.level)));
      })));
    if ((s.types || []).length) {
      out.push(h("h2", {}, "Task types ", h("small", { class: "muted" },
        `finished in the last ${s.window}; timeouts are set per type: compare the one set with the one p99 recommends`)));
      out.push(h("table", { id: "types" },
        h("tr", {}, ["type", "succeeded", "dead", "retried", "timed out", "p50", "p99", "timeout set", "recommended"]
          .map((c, i) => h("th", { class: i && i < 5 ? "num" : null }, c))),
        s.types.map((t) => h("tr", { "data-type": t.type, class: t.timed_out ? "warn" : null },
          h("td", {}, t.type), h("td", { class: "num" }, t.succeeded), h("td", { class: "num" }, t.dead),
          h("td", { class: "num" }, t.retried), h("td", { class: "num" }, t.timed_out),
          ...(t.samples ? [t.p50, t.p99] : ["–", "–"]).map((v) => h("td", {}, fmtDur(v))),
          h("td", {}, t.timeout ? fmtDur(t.timeout) : "–"),
          h("td", {}, t.samples ? fmtDur(t.recommended_timeout) : "–")))));
    }
    if (s.truncated) {
      out.push(h("p", { class: "warn", id: "stats-truncated" },
        `The stats reply was cut to fit the server's max_payload: ${s.types_omitted || 0} task types (the fewest finished) and ${s.unserved_omitted || 0} unserved types (the shallowest) are not shown.`));
    }
    if ((s.unserved || []).length) {
      out.push(h("h2", {}, "Unserved types ", h("small", { class: "muted" },
        "waiting in the buckets: no live worker serves them (no worker of their pool, or none with their handler)")));
      out.push(h("table", { id: "unserved" },
        h("tr", {}, ["type", "waiting", "oldest since", "dead-lettered after"].map((c, i) => h("th", { class: i === 1 ? "num" : null }, c))),
        s.unserved.map((u) => h("tr", { "data-type": u.type, class: "warn" },
          h("td", {}, u.type), h("td", { class: "num" }, u.depth), h("td", {}, fmtTime(u.oldest)),
          h("td", {}, u.deadline ? u.deadline + " unserved" : "never (no deadline)")))));
    }
  }
  const hist = state.history;
  const times = hist.map((x) => x.at);
  const per = (key) => [0, 1, 2, 3, 4].map((p) => hist.map((x) => (x[key] || [])[p] || 0));
  out.push(h("h2", {}, "Last minutes"));
  out.push(h("div", { class: "charts", id: "charts" },
    chart("Throughput: succeeded per second", times, per("succeeded_per_s"), fmtRate),
    chart("Depth: tasks stored per bucket", times, per("depth"), (v) => Math.round(v)),
    chart("In flight", times, per("in_flight"), (v) => Math.round(v))));
  main.replaceChildren(...out);
}

function applyOverview(ov) {
  state.overview = ov;
  state.allow = ov.allow_actions;
  if (ov.history) state.history = ov.history;
  else if (ov.sample) state.history = state.history.concat([ov.sample]).slice(-150);
  const mode = document.getElementById("mode");
  mode.textContent = ov.allow_actions ? "actions allowed" : "read-only";
  mode.className = ov.allow_actions ? "badge rw" : "badge";
  document.getElementById("live").textContent = `${ov.prefix} ${ov.version || ""} · updated ${new Date(ov.at).toLocaleTimeString()}`;
  const banner = document.getElementById("banner");
  banner.hidden = !ov.error;
  banner.textContent = ov.error || "";
  if (route().page === "overview") renderOverview();
}

function startLive() {
  if (state.live) return;
  state.live = new EventSource("/api/live");
  state.live.addEventListener("overview", (e) => applyOverview(JSON.parse(e.data)));
}

async function pageWorkers() {
  const r = await api("/api/workers");
  main.replaceChildren(h("h2", {}, `Workers (${r.workers.length + (r.omitted || 0)})`),
    r.truncated ? h("p", { class: "warn", id: "workers-truncated" }, `The reply was cut to fit the server's max_payload: ${r.omitted} workers not shown.`) : "",
    h("table", { id: "workers" },
    h("tr", {}, ["id", "host", "version", "slots", "in flight", "shards", "started", "renewed"].map((c) => h("th", {}, c))),
    r.workers.map((w) => h("tr", { "data-worker": w.id }, h("td", {}, w.id), h("td", {}, w.host), h("td", {}, w.version),
      h("td", { class: "num" }, w.concurrency), h("td", { class: "num" }, w.in_flight),
      h("td", {}, h("div", { class: "shards" }, (w.shards || []).map((s) => h("span", {}, s)))),
      h("td", {}, fmtTime(w.started_at)), h("td", {}, fmtTime(w.renewed_at))))),
    ...poolTables(r.workers));
}

// poolTables groups the workers of a pools deployment by task type: each
// type's workers, their pool (the types they serve) and the shards each owns
// in the type's ring. Nothing on a deployment without pools.
function poolTables(workers) {
  const byType = {};
  for (const w of workers) for (const t of w.types || []) (byType[t] = byType[t] || []).push(w);
  const types = Object.keys(byType).sort();
  if (!types.length) return [];
  return [h("h2", {}, "Pools ", h("small", { class: "muted" }, "each task type's workers and the shards they own in its ring")),
    h("table", { id: "pools" },
      h("tr", {}, ["type", "worker", "pool", "shards"].map((c) => h("th", {}, c))),
      types.flatMap((t) => byType[t].map((w) => h("tr", { "data-type": t, "data-worker": w.id },
        h("td", {}, t), h("td", {}, w.id), h("td", {}, (w.types || []).join(", ")),
        h("td", {}, h("div", { class: "shards" }, ((w.pools || {})[t] || []).map((s) => h("span", {}, s))))))))];
}

const STATES = ["", "PENDING", "READY", "RUNNING", "RETRYING", "SUCCEEDED", "DEAD", "CANCELLED", "PAUSED"];

function filterForm(id, fields, params, onsubmit) {
  return h("form", { class: "filters", id, onsubmit: (e) => { e.preventDefault(); onsubmit(new FormData(e.target)); } },
    fields.map(([name, label]) => h("label", {}, label, name === "state"
      ? h("select", { name, id: `${id}-${name}` }, STATES.map((s) => h("option", { value: s, selected: params.get(name) === s }, s || "any")))
      : h("input", { name, id: `${id}-${name}`, value: params.get(name) || "", placeholder: label }))),
    h("button", { type: "submit", id: `${id}-submit` }, "Search"));
}

// withParam returns params with name set to value, as a query string.
function withParam(params, name, value) {
  const q = new URLSearchParams(params);
  q.set(name, value);
  return q.toString();
}

function go(page, data) {
  const q = new URLSearchParams();
  for (const [k, v] of data) if (v) q.set(k, v);
  location.hash = `#/${page}?${q}`;
}

async function pageTasks(params) {
  const form = filterForm("search", [["id", "task id (prefix)"], ["type", "type"], ["tenant", "tenant"], ["state", "state"]], params, (d) => go("tasks", d));
  main.replaceChildren(h("h2", {}, "Tasks"), form, h("p", { class: "muted" }, "Searching…"));
  const r = await api(`/api/tasks?${params}`);
  if (r.tasks.length === 1 && params.get("id") === r.tasks[0].id) { location.hash = taskHash(r.tasks[0].id, r.tasks[0].tenant); return; }
  main.replaceChildren(h("h2", {}, "Tasks"), form,
    h("p", { class: "muted", id: "matched" }, `${r.matched} matching, most recently updated first${r.matched > r.tasks.length ? `, showing ${r.tasks.length}` : ""}`,
      r.truncated ? " (cut to fit the server's max_payload)" : "",
      r.next ? [" · ", h("a", { id: "tasks-next", href: `#/tasks?${withParam(params, "after", r.next)}` }, "next page")] : ""),
    h("table", { id: "tasks" }, h("tr", {}, ["id", "type", "tenant", "priority", "state", "attempt", "updated", "last error"].map((c) => h("th", {}, c))),
      r.tasks.map((t) => h("tr", { "data-task": t.id }, h("td", {}, taskLink(t.id, t.tenant)), h("td", {}, t.type), h("td", {}, t.tenant),
        h("td", {}, `p${t.priority}`), h("td", {}, badge(t.state)), h("td", { class: "num" }, `${t.attempt}/${t.max_attempts || "–"}`),
        h("td", {}, fmtTime(t.updated_at)), h("td", { class: "err" }, t.last_error || "")))));
}

async function pageTask(id, tenant) {
  const r = await api(`/api/tasks/${encodeURIComponent(id)}${tenant ? `?tenant=${encodeURIComponent(tenant)}` : ""}`);
  const t = r.task;
  // Buttons of actions that do not apply to the task's state are disabled
  // (the management API refuses them with 409 anyway).
  const applies = { "task.cancel": ["PENDING", "READY", "RUNNING", "RETRYING", "PAUSED"], "task.pause": ["PENDING", "READY", "RETRYING"],
    "task.resume": ["PAUSED"], "task.reprioritize": ["READY"], "dlq.replay": ["DEAD"] };
  const why = (verb) => (applies[verb].includes(t.state) ? null : `applies to ${applies[verb].join(", ")} tasks; this one is ${t.state}`);
  const act = (verb, label, body, text) => actionButton(label, { "data-action": verb, title: why(verb) }, async () => {
    const reply = await confirmAction(text, verb, body);
    if (reply) { toast(`${label}: done`); route().render(); }
  });
  const prio = h("select", { id: "new-priority" }, [0, 1, 2, 3, 4].map((p) => h("option", { value: p, selected: p === t.priority }, `p${p}`)));
  const fields = [["id", t.id], ["state", badge(t.state)], ["type", t.type], ["tenant", t.tenant], ["key", t.key],
    ["priority", `p${t.priority}`], ["attempt", `${t.attempt} of ${t.max_attempts || "worker default"}`], ["timeout", t.timeout],
    ["generation", t.gen], ["worker", t.worker], ["created", fmtTime(t.created_at)], ["updated", fmtTime(t.updated_at)],
    ["started", fmtTime(t.started_at)], ["finished", fmtTime(t.finished_at)], ["last error", t.last_error],
    ["dead letter", t.dlq_seq ? `AX_DLQ #${t.dlq_seq}` : ""], ["revision", r.revision]];
  if (t.progress) fields.splice(2, 0, ["progress", progressBar(t.progress)]);
  if (r.result) fields.splice(2, 0, ["result", resultView(r.result)]);
  // A task that has not ended is read again every second while shown: its
  // progress bar and state follow the record.
  if (["PENDING", "READY", "RUNNING", "RETRYING"].includes(t.state)) {
    const shown = location.hash;
    clearTimeout(pageTask.timer);
    pageTask.timer = setTimeout(() => { if (location.hash === shown) route().render(); }, 1000);
  }
  main.replaceChildren(h("h2", {}, "Task ", h("code", {}, t.id)),
    h("div", { class: "actions" },
      act("task.cancel", "Cancel", { id: t.id, tenant: t.tenant }, `Cancel task ${t.id} of ${t.tenant}? A running handler is stopped; it is never retried.`),
      act("task.pause", "Pause", { id: t.id, tenant: t.tenant }, `Pause task ${t.id} of ${t.tenant}? It stays in its bucket until resumed.`),
      act("task.resume", "Resume", { id: t.id, tenant: t.tenant }, `Resume task ${t.id} of ${t.tenant}?`),
      prio, actionButton("Reprioritize", { "data-action": "task.reprioritize", title: why("task.reprioritize") }, async () => {
        const p = Number(prio.value);
        const reply = await confirmAction(`Move task ${t.id} from p${t.priority} to p${p}?`, "task.reprioritize", { id: t.id, tenant: t.tenant, priority: p });
        if (reply) { toast("Reprioritized"); route().render(); }
      }),
      t.state === "DEAD" ? act("dlq.replay", "Replay", { id: t.id, tenant: t.tenant }, `Replay task ${t.id} of ${t.tenant} from the dead-letter queue?`) : null,
      h("button", { type: "button", class: "secondary", onclick: () => route().render() }, "Refresh")),
    h("dl", { class: "record", id: "record" }, fields.flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-field": k }, v ?? "")])),
    h("h2", {}, `Trail (${r.trail.length} moves)`),
    h("ol", { class: "timeline", id: "trail" }, r.trail.map((m) => h("li", { class: m.to },
      h("div", {}, h("b", {}, `${m.from ? m.from + " → " : ""}${m.to}`), " ", h("span", { class: "muted" }, m.action || "")),
      h("div", { class: "muted" }, fmtTime(m.at), m.took ? ` · after ${fmtDur(m.took)}` : "", m.worker ? ` · ${m.worker}` : ""),
      m.error ? h("div", { class: "err" }, m.error) : null))));
}

// progressBar shows a handler's progress report: a bar, the percent, the note.
function progressBar(p) {
  return h("span", { id: "progress" }, h("progress", { max: 100, value: p.percent }), ` ${Math.round(p.percent * 10) / 10}% `,
    h("span", { class: "muted" }, p.note || ""));
}

// resultView shows a result: its text (cut to what the server sends) or its size.
function resultView(r) {
  if (r.binary) return h("span", { id: "result", class: "muted" }, `${r.size} bytes of binary (ax task result ID prints them)`);
  return h("span", { id: "result" }, h("code", { class: "result" }, r.text),
    r.truncated ? h("span", { class: "muted" }, ` …cut: ${r.size} bytes in all (ax task result ID prints them)`) : "");
}

async function pageDLQ(params) {
  const form = filterForm("dlq-filter", [["type", "type"], ["tenant", "tenant"]], params, (d) => go("dlq", d));
  const r = await api(`/api/dlq?${params}`);
  const filter = { type: params.get("type") || undefined, tenant: params.get("tenant") || undefined };
  const checks = [];
  // replay confirms once, then sends each request body (an id, or a filter).
  const replay = async (bodies, text) => {
    if (!(await ask(text))) return;
    let replayed = [], skipped = {};
    for (const body of bodies) {
      const reply = await post("dlq.replay", body);
      if (!reply) break;
      replayed = replayed.concat((reply.replayed || []).map((t) => `${t.id} (${t.tenant})`));
      Object.assign(skipped, reply.skipped || {});
    }
    toast(`Replayed ${replayed.length}: ${replayed.join(", ")}${Object.keys(skipped).length ? `; skipped ${JSON.stringify(skipped)}` : ""}`);
    route().render();
  };
  main.replaceChildren(h("h2", {}, `Dead letters (${r.total})`), form,
    r.truncated || r.next ? h("p", { class: "muted", id: "dlq-page" }, `showing ${r.letters.length}`,
      r.truncated ? " (cut to fit the server's max_payload)" : "",
      r.next ? [" · ", h("a", { id: "dlq-next", href: `#/dlq?${withParam(params, "after", r.next)}` }, "next page")] : "") : "",
    h("div", { class: "actions" },
      // The API replays one id per request: a selection is confirmed once
      // and sent id by id.
      actionButton("Replay selected", { id: "replay-selected", class: "secondary" }, () => {
        const tasks = checks.filter((c) => c.checked && c.value).map((c) => ({ id: c.value, tenant: c.dataset.tenant }));
        if (tasks.length) replay(tasks, `Replay ${tasks.length} selected task(s)? They go back to READY with their attempts reset.`);
      }),
      actionButton(`Replay all matching (${r.total})`, { id: "replay-all",
        title: filter.type || filter.tenant ? null : "filter by type or tenant first (the API replays in bulk by filter)" }, () =>
        replay([Object.assign({ limit: 10000 }, filter)], `Replay all ${r.total} dead letters matching ${JSON.stringify(filter)}?`))),
    filter.type || filter.tenant ? null : h("p", { class: "muted" }, "Bulk replay needs a type or tenant filter."),
    h("table", { id: "dlq" }, h("tr", {}, ["", "#", "task", "type", "tenant", "attempts", "failed at", "error", ""].map((c) => h("th", {}, c))),
      r.letters.map((l) => {
        const c = h("input", { type: "checkbox", value: l.task_id, "data-tenant": l.tenant });
        checks.push(c);
        return h("tr", { "data-letter": l.task_id }, h("td", {}, c), h("td", { class: "num" }, l.seq), h("td", {}, l.task_id ? taskLink(l.task_id, l.tenant) : "–"),
          h("td", {}, l.type), h("td", {}, l.tenant), h("td", { class: "num" }, l.attempts), h("td", {}, fmtTime(l.failed_at)),
          h("td", { class: "err" }, l.error), h("td", {}, actionButton("Replay", { "data-replay": l.task_id }, () =>
            replay([{ id: l.task_id, tenant: l.tenant }], `Replay task ${l.task_id} of ${l.tenant}? It goes back to READY with its attempts reset.`))));
      })));
}

async function pageCron() {
  const r = await api("/api/cron");
  main.replaceChildren(h("h2", {}, `Cron schedules (${r.jobs.length})`),
    r.jobs.length === 0 ? h("p", { class: "muted", id: "no-cron" }, "No cron jobs: the control bucket holds no cron.<name> keys.") :
      h("table", { id: "cron" }, h("tr", {}, ["name", "spec", "task", "last run", "next (leader)", "next runs", ""].map((c) => h("th", {}, c))),
        r.jobs.map((j) => h("tr", { "data-cron": j.name }, h("td", {}, j.name), h("td", {}, h("code", {}, j.spec)),
          h("td", {}, `${j.type || "?"} · ${j.tenant || "?"} · p${j.priority}`), h("td", {}, fmtTime(j.last)), h("td", {}, fmtTime(j.next)),
          h("td", {}, j.upcoming.map((t) => h("div", {}, fmtTime(t)))), h("td", { class: "err" }, j.error || "")))));
}

// pageLimits lists the mesh-wide limits with their use and the paused
// types and tenants, and sets, removes, pauses and resumes them.
async function pageLimits() {
  const r = await api("/api/limits");
  const target = h("input", { id: "limit-target", placeholder: "type, tenant:NAME or key:PATTERN" });
  const conc = h("input", { id: "limit-concurrency", type: "number", min: "0", placeholder: "concurrency" });
  const rate = h("input", { id: "limit-rate", type: "number", min: "0", step: "any", placeholder: "rate/s" });
  const burst = h("input", { id: "limit-burst", type: "number", min: "0", placeholder: "burst" });
  const weight = h("input", { id: "limit-weight", type: "number", min: "0", placeholder: "weight (tenant or type)" });
  const pauseType = h("input", { id: "pause-type", placeholder: "task type" });
  const pauseTenant = h("input", { id: "pause-tenant", placeholder: "tenant" });
  const num = (el) => (el.value === "" ? undefined : Number(el.value));
  const done = (reply) => { if (reply) pageLimits(); };
  main.replaceChildren(h("h2", {}, `Limits (${r.limits.length})`),
    r.limits.length === 0 ? h("p", { class: "muted", id: "no-limits" }, "No limits: every task starts as soon as a worker slot takes it.") :
      h("table", { id: "limits" }, h("tr", {}, ["target", "concurrency", "in use", "rate/s", "burst", "tokens", "weight", ""].map((c) => h("th", {}, c))),
        r.limits.map((l) => h("tr", { "data-limit": l.target }, h("td", {}, l.target),
          h("td", { class: "num" }, l.concurrency || "–"), h("td", { class: "num" }, l.concurrency ? l.in_use : "–"),
          h("td", { class: "num" }, l.rate || "–"), h("td", { class: "num" }, l.rate ? (l.burst || 1) : "–"),
          h("td", { class: "num" }, l.rate ? l.tokens.toFixed(1) : "–"), h("td", { class: "num" }, l.weight || "–"),
          h("td", {}, l.error ? h("span", { class: "err" }, l.error) : null,
            actionButton("Remove", { "data-remove": l.target }, async () =>
              done(await confirmAction(`Remove the limit of ${l.target}?`, "limit.rm", { target: l.target }))))))),
    h("form", { id: "limit-form", onsubmit: async (e) => {
      e.preventDefault();
      done(await confirmAction(`Set the limit of ${target.value}? It replaces its limit, on every worker at once.`, "limit.set",
        { target: target.value, concurrency: num(conc), rate: num(rate), burst: num(burst), weight: num(weight) }));
    } }, target, conc, rate, burst, weight, actionButton("Set limit", { type: "submit" })),
    h("h2", {}, `Paused (${r.paused.length})`),
    r.paused.length === 0 ? h("p", { class: "muted", id: "no-paused" }, "Nothing paused.") :
      h("table", { id: "paused" }, h("tr", {}, ["target", "since", ""].map((c) => h("th", {}, c))),
        r.paused.map((p) => {
          const body = p.target.startsWith("tenant:") ? { tenant: p.target.slice(7) } : { type: p.target };
          return h("tr", { "data-paused": p.target }, h("td", {}, p.target), h("td", {}, fmtTime(p.at)),
            h("td", {}, actionButton("Resume", { "data-resume": p.target }, async () =>
              done(await confirmAction(`Resume ${p.target}? Its tasks start within 5 s.`, "resume", body)))));
        })),
    h("form", { id: "pause-form", onsubmit: async (e) => {
      e.preventDefault();
      const body = pauseTenant.value ? { tenant: pauseTenant.value } : { type: pauseType.value };
      done(await confirmAction(`Pause ${JSON.stringify(body)}? No worker starts its tasks until it is resumed.`, "pause", body));
    } }, pauseType, pauseTenant, actionButton("Pause", { type: "submit" })));
}

// The states a workflow's tasks are counted by, in the order shown.
const TASK_STATES = ["WAITING", "PENDING", "READY", "RUNNING", "RETRYING", "PAUSED", "SUCCEEDED", "DEAD", "CANCELLED"];
const stateCounts = (states) => TASK_STATES.filter((s) => states[s]).map((s) => `${states[s]} ${s}`).join(", ");
// A workflow id belongs to its tenant, as a task's does.
const workflowHash = (id, tenant) => `#/workflow/${encodeURIComponent(id)}?tenant=${encodeURIComponent(tenant)}`;

async function pageWorkflows(params) {
  const form = filterForm("wf-filter", [["tenant", "tenant"]], params, (d) => go("workflows", d));
  const r = await api(`/api/workflows?${params}`);
  main.replaceChildren(h("h2", {}, "Workflows"), form,
    h("p", { class: "muted" }, `${r.workflows.length} newest${params.get("tenant") ? ` of ${params.get("tenant")}` : ""}`),
    h("table", { id: "workflows" }, h("tr", {}, ["id", "tenant", "state", "tasks", "submitted", "task states"].map((c) => h("th", {}, c))),
      r.workflows.map((w) => h("tr", { "data-workflow": w.id },
        h("td", {}, h("a", { href: workflowHash(w.id, w.tenant), "data-workflow-link": w.id }, w.id)), h("td", {}, w.tenant),
        h("td", {}, badge(w.state)), h("td", { class: "num" }, w.tasks), h("td", {}, fmtTime(w.submitted_at)),
        h("td", {}, stateCounts(w.states))))));
}

// graph draws a workflow as SVG: one column per layer (a task's is one
// more than its deepest parent's), a box per task linked to its page,
// and an arrow from each parent to its child.
function graph(wf) {
  const NS = "http://www.w3.org/2000/svg", BW = 150, BH = 34, GX = 60, GY = 14;
  const rows = [];
  for (const n of wf.nodes) (rows[n.layer] ||= []).push(n);
  const height = Math.max(...rows.map((r) => r.length), 1);
  const W = rows.length * (BW + GX), H = height * (BH + GY) + GY;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", W);
  svg.setAttribute("id", "workflow-graph");
  const el = (parent, tag, attrs) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    parent.append(e);
    return e;
  };
  const at = {};
  rows.forEach((row, layer) => row.forEach((n, i) => { at[n.name] = { x: layer * (BW + GX) + 4, y: GY + i * (BH + GY) }; }));
  const fill = { SUCCEEDED: "#dcf2e3", DEAD: "#f8d4d4", CANCELLED: "#f8d4d4", RETRYING: "#fbefcf", PAUSED: "#fbefcf", WAITING: "#eef0f4" };
  for (const n of wf.nodes) for (const p of n.after || []) {
    if (!at[p]) continue;
    el(svg, "line", { x1: at[p].x + BW, y1: at[p].y + BH / 2, x2: at[n.name].x, y2: at[n.name].y + BH / 2,
      stroke: "#9aa3b5", "stroke-width": 1.5, "data-edge": `${p}->${n.name}` });
  }
  for (const n of wf.nodes) {
    const a = el(svg, "a", { href: taskHash(n.task_id, wf.tenant), "data-node": n.name });
    el(a, "rect", { x: at[n.name].x, y: at[n.name].y, width: BW, height: BH, rx: 5, fill: fill[n.state] || "#dbe7fc", stroke: "#9aa3b5" });
    el(a, "text", { x: at[n.name].x + 8, y: at[n.name].y + 14, "font-size": 12, fill: "#1d2330" }).textContent = n.name.slice(0, 22);
    el(a, "text", { x: at[n.name].x + 8, y: at[n.name].y + 28, "font-size": 10, fill: "#6b7384" }).textContent = n.state;
  }
  return h("div", { class: "graph" }, svg);
}

async function pageWorkflow(id, tenant) {
  const wf = await api(`/api/workflows/${encodeURIComponent(id)}${tenant ? `?tenant=${encodeURIComponent(tenant)}` : ""}`);
  const shown = location.hash;
  if (wf.state === "RUNNING" || wf.state === "PAUSED") { // read again every 2 seconds while it runs (or waits for its resume) and is shown
    clearTimeout(pageWorkflow.timer);
    pageWorkflow.timer = setTimeout(() => { if (location.hash === shown) route().render(); }, 2000);
  }
  const layers = [];
  for (const n of wf.nodes) (layers[n.layer] ||= []).push(n);
  main.replaceChildren(h("h2", {}, "Workflow ", h("code", {}, wf.id), " ", badge(wf.state)),
    h("dl", { class: "record", id: "workflow" }, [["tenant", wf.tenant], ["tasks", `${wf.tasks}: ${stateCounts(wf.states)}`],
      ["on failure", wf.on_failure], ["submitted", fmtTime(wf.submitted_at)]].flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-field": k }, v)])),
    wf.truncated ? h("p", { class: "muted" }, `Showing the first ${wf.nodes.length} tasks of ${wf.tasks} (cut to fit the server's max_payload); ax workflow get prints them all.`) : null,
    h("h2", {}, "Graph"), graph(wf),
    h("h2", {}, `Layers (${wf.layers})`),
    h("table", { id: "workflow-tasks" }, h("tr", {}, ["layer", "task", "state", "type", "after", "waits for", "last error"].map((c) => h("th", {}, c))),
      layers.flatMap((row, layer) => row.map((n) => h("tr", { "data-node": n.name },
        h("td", { class: "num" }, layer), h("td", {}, h("a", { href: taskHash(n.task_id, wf.tenant), "data-task-link": n.task_id, "data-tenant": wf.tenant }, n.name)),
        h("td", {}, badge(n.state)), h("td", {}, n.type), h("td", {}, (n.after || []).join(", ")),
        h("td", {}, n.state === "WAITING" ? (n.waits_for || []).join(", ") : ""), h("td", { class: "err" }, n.last_error || ""))))));
}

function route() {
  const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
  const params = new URLSearchParams(query || "");
  const [page, ...rest] = path.split("/");
  const id = decodeURIComponent(rest.join("/"));
  const pages = {
    "": ["overview", renderOverview], workers: ["workers", pageWorkers], tasks: ["tasks", () => pageTasks(params)],
    task: ["tasks", () => pageTask(id, params.get("tenant"))], dlq: ["dlq", () => pageDLQ(params)], cron: ["cron", pageCron],
    limits: ["limits", pageLimits], workflows: ["workflows", () => pageWorkflows(params)],
    workflow: ["workflows", () => pageWorkflow(id, params.get("tenant"))],
  };
  const [name, fn] = pages[page] || pages[""];
  return { page: page === "" ? "overview" : page, nav: name, render: async () => {
    try { await fn(); } catch (e) { main.replaceChildren(h("p", { class: "err", id: "error" }, e.message)); }
  } };
}

function navigate() {
  const r = route();
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === r.nav);
  if (r.page === "overview" && !state.overview) main.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  r.render();
}

takeToken();
window.addEventListener("hashchange", navigate);
api("/api/overview").then(applyOverview).catch((e) => toast(e.message, true)).finally(() => { navigate(); startLive(); });
