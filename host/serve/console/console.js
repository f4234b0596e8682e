// The console of weir serve: an overview of the pipelines (#/) and a page per pipeline
// (#/pipeline/<name>), both read from the admin API every two seconds. Rollback and stop
// call the authenticated API with the token kept in sessionStorage.
"use strict";

const TOKEN_KEY = "weir-token";
const POLL_MS = 2000;
// Counts seen at the previous poll, per pipeline, for the per-edge rates.
const previous = {};

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

// A duration in human units: "850 ms", "12.3 s", "58 min 30 s", "5 h 2 min", "2 d 10 h".
function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  const sign = ms < 0 ? "-" : "";
  let rest = Math.abs(Math.round(ms));
  if (rest < 1000) return sign + rest + " ms";
  if (rest < 60000) return sign + (rest / 1000).toFixed(1) + " s";
  const units = [["d", 86400000], ["h", 3600000], ["min", 60000], ["s", 1000]];
  const i = units.findIndex(([, size]) => rest >= size);
  const [big, bigSize] = units[i];
  const [small, smallSize] = units[i + 1];
  const n = Math.floor(rest / bigSize);
  const m = Math.floor((rest - n * bigSize) / smallSize);
  return `${sign}${n} ${big} ${m} ${small}`;
}

function bytes(n) {
  if (n < 1024) return n + " B";
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n, i = -1;
  do { v /= 1024; i++; } while (v >= 1024 && i < units.length - 1);
  return v.toFixed(1) + " " + units[i];
}

function dateTime(ms) {
  return ms === null || ms === undefined ? "–" : new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC");
}

function rate(perSecond) {
  if (perSecond === null || perSecond === undefined) return "– rec/s";
  return (perSecond >= 100 ? Math.round(perSecond) : perSecond.toFixed(1)) + " rec/s";
}

// Records/s between the status's samples (unix ms, processed), the last 120.
function rates(history) {
  const out = [];
  for (let i = 1; i < history.length; i++) {
    const dt = (history[i][0] - history[i - 1][0]) / 1000;
    out.push([history[i][0], dt > 0 ? (history[i][1] - history[i - 1][1]) / dt : 0]);
  }
  return out.slice(-120);
}

// A line chart of (unix ms, value) points with its scale: the maximum and 0 on the
// y axis, the span and "now" on the time axis.
function chart(points, unit, width, height) {
  const ns = "http://www.w3.org/2000/svg";
  const w = width || 480, h = height || 120, left = 56, bottom = 18;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h);
  svg.setAttribute("class", "chart");
  const max = Math.max(1, ...points.map(p => p[1]));
  const t0 = points.length ? points[0][0] : 0, t1 = points.length ? points[points.length - 1][0] : 1;
  const x = t => left + ((t - t0) / Math.max(1, t1 - t0)) * (w - left - 4);
  const y = v => (h - bottom) - (v / max) * (h - bottom - 8);
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.appendChild(node);
    return node;
  };
  add("line", { x1: left, y1: y(max), x2: left, y2: y(0), stroke: "#aaa" });
  add("line", { x1: left, y1: y(0), x2: w - 4, y2: y(0), stroke: "#aaa" });
  add("text", { x: left - 4, y: y(max) + 4, "text-anchor": "end", class: "y-max" }, (max >= 100 ? Math.round(max) : max.toFixed(1)) + " " + unit);
  add("text", { x: left - 4, y: y(0), "text-anchor": "end", class: "y-zero" }, "0");
  add("text", { x: left, y: h - 4, class: "x-start" }, points.length ? "-" + duration(t1 - t0) : "no data yet");
  add("text", { x: w - 4, y: h - 4, "text-anchor": "end", class: "x-end" }, "now");
  if (points.length > 1) {
    add("polyline", {
      points: points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
      fill: "none", stroke: "#3367d6", "stroke-width": "1.5",
    });
  }
  return svg;
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function showTokenState() {
  document.getElementById("token-state").textContent = token() ? "token set" : "no token: read-only";
}

// Calls the admin API with the token; resolves to its JSON body or throws its error message.
async function callApi(method, path) {
  if (!token()) throw new Error("this needs the API token (the one weir serve printed): enter it above");
  const response = await fetch(path, { method, headers: { Authorization: "Bearer " + token() } });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || `${response.status} ${response.statusText}`);
  return body;
}

// The buttons' handler: rollback or stop of pipeline `name` (a rollback of its stage
// `stage`, in a pipeline of several), its outcome shown beside them.
async function act(name, action, stage) {
  const result = document.getElementById("action-result" + (stage ? "-" + stage : ""));
  result.className = "action-result";
  result.textContent = action + "…";
  try {
    const query = stage ? "?stage=" + encodeURIComponent(stage) : "";
    const body = await callApi("POST", `/api/pipelines/${encodeURIComponent(name)}/${action}${query}`);
    result.textContent = action === "rollback" ? `rolled back to v${body.version}` : `stopped (${body.state})`;
  } catch (e) {
    result.className = "action-result failed";
    result.textContent = action + " failed: " + e.message;
  }
  refresh();
}

// What the overview and the head of a page show of a pipeline: its status, or for a
// pipeline of several stages (a status each) the records its first stages read (those
// reading sources), the largest watermark lag, and every stage's dead letters and errors.
function pipelineStatus(p) {
  if (p.status) return p.status;
  const stages = p.stages || [];
  const roots = stages.filter((st, i) => p.graph.stages[i].sources.some(src => src.type !== "stage"));
  const sum = (list, f) => list.reduce((n, st) => n + (f(st.status) || 0), 0);
  const lags = stages.map(st => st.status.watermark_lag_ms).filter(v => v !== null && v !== undefined);
  const causes = {};
  for (const st of stages) for (const [k, v] of Object.entries(st.status.dead_letter_causes || {})) causes[k] = (causes[k] || 0) + v;
  const history = (roots[0] ? roots[0].status.history : []).map(([t], i) =>
    [t, roots.reduce((n, st) => n + ((st.status.history[i] || [])[1] || 0), 0)]);
  return {
    records_per_second: sum(roots, s => s.records_per_second), processed: sum(roots, s => s.processed), history,
    watermark_lag_ms: lags.length ? Math.max(...lags) : null, dead_letters: sum(stages, s => s.dead_letters),
    dead_letter_causes: causes, late: sum(stages, s => s.late),
    exceptions: stages.flatMap(st => st.status.exceptions).sort((a, b) => a.at - b.at),
  };
}

// The UDF column of the overview: "v2", or per stage "count v1, sum v2".
function udfVersions(p) {
  if (p.udf) return "v" + (p.udf.version ?? "?");
  return (p.stages || []).map(st => `${st.name} v${st.udf.version ?? "?"}`).join(", ");
}

/** Why the present run sent records to the dead letters: "3 rejected by the UDF, 1 ...". */
function deadLetterCauses(s) {
  const c = s.dead_letter_causes || {};
  return [[c.undecodable, "undecodable"], [c.rejected, "rejected by the UDF"], [c.failed, "the UDF failed on"],
    [c.unreadable_state, "whose state the UDF cannot read"]]
    .filter(([n]) => n > 0).map(([n, why]) => `${n} ${why}`).join(", ");
}

function figure(label, value, cls, attrs) {
  return el("div", { class: "figure" }, el("div", { class: "label" }, label), el("div", Object.assign({ class: "value " + cls }, attrs || {}), value));
}

function overview(body) {
  const rows = body.pipelines.map(p => {
    const s = pipelineStatus(p);
    return el("tr", { "data-pipeline": p.name },
      el("td", { class: "name" }, el("a", { href: "#/pipeline/" + encodeURIComponent(p.name) }, p.name)),
      el("td", { class: "state state-" + p.state }, p.state),
      el("td", { class: "number" }, udfVersions(p)),
      el("td", { class: "num rate" }, rate(s.records_per_second)),
      el("td", {}, chart(rates(s.history), "rec/s", 220, 60)),
      el("td", { class: "num processed" }, s.processed),
      el("td", { class: "num lag" }, duration(s.watermark_lag_ms)),
      el("td", { class: "num dead-letters", title: deadLetterCauses(s) }, s.dead_letters),
      el("td", { class: "num count" }, s.exceptions.length));
  });
  return el("section", {}, el("h2", {}, "Pipelines"),
    el("table", { class: "overview" },
      el("thead", {}, el("tr", {}, ...["pipeline", "state", "UDF", "records/s", "last minutes", "processed", "watermark lag", "dead letters", "errors"].map(h => el("th", {}, h)))),
      el("tbody", { id: "pipelines" }, ...rows)));
}

// Per-edge rates of `part` (a pipeline, or a stage named `pipeline/stage`) from the
// counts at this poll and the one before.
function edgeRates(part) {
  const now = Date.now(), s = part.status, before = previous[part.name];
  const out = { sources: {}, outputs: {} };
  if (before && now > before.at) {
    const dt = (now - before.at) / 1000;
    for (const [n, c] of s.sources) if (n in before.sources) out.sources[n] = Math.max(0, c - before.sources[n]) / dt;
    for (const [n, c] of s.outputs) if (n in before.outputs) out.outputs[n] = Math.max(0, c - before.outputs[n]) / dt;
  }
  previous[part.name] = { at: now, sources: Object.fromEntries(s.sources), outputs: Object.fromEntries(s.outputs) };
  return out;
}

function edge(kind, name, count, perSecond) {
  return el("div", { class: "edge", "data-edge": kind + ":" + name },
    el("span", { class: "edge-rate" }, rate(perSecond)),
    el("span", { class: "arrow" }, "→"),
    el("span", { class: "edge-count muted" }, count + " records"));
}

// One keyed stage drawn as its inputs, its UDF and its outputs, a records/s on every
// edge: `part` has the stage's `name` (for its rates), `status`, `graph` and `udf`; its
// nodes and edges are named with `prefix` ("" for a pipeline of one stage, "count/" for
// stage count of several). An input from another stage and an output read by other
// stages say so.
function stageRow(part, prefix) {
  const s = part.status, r = edgeRates(part);
  const counts = list => Object.fromEntries(list);
  const read = counts(s.sources), emitted = counts(s.outputs);
  const sources = el("div", { class: "column" }), inEdges = el("div", { class: "column" });
  for (const src of part.graph.sources) {
    const kind = src.type === "stage" ? "from stage" : src.type + " source";
    sources.append(el("div", { class: "node node-" + (src.type === "stage" ? "stage-input" : "source"), "data-node": prefix + "source:" + src.name }, src.name, el("div", { class: "kind" }, kind)));
    inEdges.append(edge(prefix + "source", src.name, read[src.name] ?? 0, r.sources[src.name]));
  }
  const udf = el("div", { class: "node node-udf", "data-node": prefix + "udf" }, part.graph.udf, el("div", { class: "kind" }, "UDF v" + (part.udf.version ?? "?")));
  const outEdges = el("div", { class: "column" }), sinks = el("div", { class: "column" });
  for (const sink of part.graph.sinks) {
    const readers = sink.stages ? ` and ${sink.stages} stage(s)` : "";
    outEdges.append(edge(prefix + "output", sink.output, emitted[sink.output] ?? 0, r.outputs[sink.output]));
    sinks.append(el("div", { class: "node node-sink", "data-node": prefix + "sink:" + sink.output }, sink.output, el("div", { class: "kind" }, sink.type + " sink" + readers)));
  }
  return el("div", { class: "graph", "data-stage": part.name }, sources, inEdges, udf, outEdges, sinks);
}

// The pipeline's graph: one row for a pipeline of one stage; for several, a row per
// stage, in the graph's order, each headed by the stage's name.
function graph(p) {
  const s = pipelineStatus(p);
  const rows = p.status ? [stageRow(p, "")] : p.stages.flatMap((st, i) => [
    el("h3", { class: "stage-name" }, "stage " + st.name + " (" + st.state + ")"),
    stageRow({ name: p.name + "/" + st.name, status: st.status, graph: p.graph.stages[i], udf: st.udf }, st.name + "/")]);
  return el("section", { id: "graph" }, el("h2", {}, "Graph"), ...rows,
    el("p", { class: "muted" }, `records/s per edge between two polls; dead letters: ${s.dead_letters}, late: ${s.late}. ` +
      "Backpressure is not measured: a sink that cannot keep up shows as a records/s on its edge lower than the source's."));
}

function checkpoints(s) {
  const rows = s.checkpoint_history.slice().reverse().map(c =>
    el("tr", { class: "checkpoint", "data-epoch": c.epoch, "data-bytes": c.bytes },
      el("td", { class: "num" }, c.epoch), el("td", {}, dateTime(c.at)),
      el("td", { class: "num" }, duration(c.pause_ms)), el("td", { class: "num" }, bytes(c.bytes)), el("td", {}, c.kind)));
  return el("section", { id: "checkpoints" }, el("h2", {}, `Checkpoints (${s.checkpoints} this run, last ${s.checkpoint_history.length} shown)`),
    rows.length ? el("div", { class: "scroll" }, el("table", {},
      el("thead", {}, el("tr", {}, ...["epoch", "taken at", "pause", "size", "kind"].map(h => el("th", {}, h)))),
      el("tbody", {}, ...rows))) : el("p", { class: "muted" }, "none yet (is [checkpoint] on?)"));
}

function exceptions(s) {
  const entries = s.exceptions.slice().reverse().map(e =>
    el("div", { class: "exception" }, el("div", { class: "muted exception-at" }, dateTime(e.at)), el("pre", { class: "exception-message" }, e.message)));
  return el("section", { id: "exceptions" }, el("h2", {}, `Exceptions (${s.exceptions.length})`),
    entries.length ? el("div", { class: "exceptions" }, ...entries) : el("p", { class: "muted" }, "none"));
}

// The UDF versions and history of pipeline `p`, with its rollback and stop buttons; with
// `stage`, those of that stage of `p` (its own rollback; the history's entries about it).
function versions(p, stage) {
  const suffix = stage ? "-" + stage.name : "";
  const history = (p.history || []).filter(h => !stage || h.stage === stage.name);
  const rows = history.slice().reverse().map(h =>
    el("tr", { class: "history-entry", "data-action": h.action, "data-version": h.version },
      el("td", {}, dateTime(h.at)), el("td", { class: "action" }, h.action), el("td", {}, h.version ? "v" + h.version : ""), el("td", { class: "detail" }, h.detail || "")));
  const kept = ((stage || p).versions || []).map(v =>
    el("tr", { class: "version" + (v.active ? " active" : "") },
      el("td", {}, "v" + v.version + (v.active ? " (active)" : "")), el("td", {}, el("code", {}, v.sha256.slice(0, 12))),
      el("td", { class: "num" }, bytes(v.bytes)), el("td", {}, dateTime(v.deployed_at))));
  const name = p.name;
  return el("section", { id: "versions" + suffix, class: "versions" }, el("h2", {}, stage ? `UDF versions of stage ${stage.name}` : "UDF versions"),
    el("div", { class: "actions" },
      el("button", { id: "rollback" + suffix, onclick: () => act(name, "rollback", stage && stage.name) }, "roll back to the version before"),
      stage ? null : el("button", { id: "stop", onclick: () => act(name, "stop") }, "stop"),
      el("span", { id: "action-result" + suffix, class: "action-result" + (token() ? "" : " muted") }, token() ? "" : "rollback and stop need the API token (enter it above)")),
    el("table", {}, el("thead", {}, el("tr", {}, ...["version", "sha256", "size", "deployed at"].map(h => el("th", {}, h)))), el("tbody", {}, ...kept)),
    el("h2", {}, "History"),
    el("div", { class: "scroll" }, el("table", {}, el("thead", {}, el("tr", {}, ...["at", "what", "version", "detail"].map(h => el("th", {}, h)))), el("tbody", {}, ...rows))));
}

function tasks(s) {
  if (!s.task_status) return null;
  const rows = s.task_status.map(t =>
    el("tr", { class: "task", "data-task": t.task },
      el("td", {}, t.task), el("td", { class: "state-" + t.state }, t.state), el("td", { class: "num" }, t.processed),
      el("td", { class: "num" }, rate(t.records_per_second)), el("td", { class: "num" }, duration(t.watermark_lag_ms)),
      el("td", { class: "num" }, t.checkpoints), el("td", {}, t.last_error || "")));
  return el("section", { id: "tasks" }, el("h2", {}, `Tasks in this process (${rows.length})`),
    el("table", {}, el("thead", {}, el("tr", {}, ...["task", "state", "processed", "records/s", "watermark lag", "checkpoints", "last error"].map(h => el("th", {}, h)))), el("tbody", {}, ...rows)));
}

// The disk state backend's figures: on disk, in memory, and the cache's hit rate.
function storeSummary(store) {
  const named = store.hits + store.lookups;
  const hitRate = named ? `${(100 * store.hits / named).toFixed(1)}% hits` : "no key named yet";
  return `${bytes(store.disk_bytes)} on disk, ${bytes(store.resident_bytes + store.store_memory_bytes)} in memory, ${hitRate}`;
}

function pipelinePage(p) {
  const s = pipelineStatus(p);
  const udf = p.udf ? figure("UDF", `${p.udf.name} v${p.udf.version ?? "?"}`, "udf") : figure("stages", udfVersions(p), "udf");
  const head = el("section", { id: "summary" },
    el("h2", {}, el("a", { href: "#/" }, "pipelines"), " / ", el("span", { class: "name" }, p.name)),
    el("div", { class: "figures" },
      figure("state", p.state, "state state-" + p.state), udf,
      figure(p.status ? "records/s" : "records/s in", rate(s.records_per_second), "rate"),
      figure(p.status ? "processed" : "read", s.processed, "processed"),
      p.status && figure("watermark", dateTime(s.watermark), "watermark"),
      figure("watermark lag", duration(s.watermark_lag_ms), "lag", { "data-ms": s.watermark_lag_ms ?? "" }),
      p.status && figure("keys", s.keys, "keys"), p.status && figure("state", bytes(s.state_bytes), "state-bytes"),
      p.status && figure("timers", s.event_timers + s.processing_timers, "timers"),
      p.status && s.state_store && figure("state store", storeSummary(s.state_store), "state-store"),
      figure("dead letters", s.dead_letters, "dead-letters", { title: deadLetterCauses(s) }),
      deadLetterCauses(s) && figure("why dead letters", deadLetterCauses(s), "dead-letter-causes"),
      figure("late", s.late, "late")));
  const throughput = el("section", { id: "throughput" }, el("h2", {}, "Records/s, last minutes"), chart(rates(s.history), "rec/s"));
  const definition = el("section", { id: "definition" }, el("h2", {}, "Pipeline file"), el("pre", { class: "definition" }, p.definition || ""));
  if (!p.status) {
    // A pipeline of several stages: its stop, then per stage its figures, checkpoints,
    // errors and versions.
    const stop = el("div", { class: "actions" }, el("button", { id: "stop", onclick: () => act(p.name, "stop") }, "stop"),
      el("span", { id: "action-result", class: "action-result" }, ""));
    const stages = p.stages.map(st => el("section", { class: "stage", "data-stage": st.name },
      el("h2", {}, `Stage ${st.name}: ${st.udf.name} v${st.udf.version ?? "?"}, ${rate(st.status.records_per_second)}, ${st.status.processed} processed, ` +
        `${st.status.keys} keys, ${bytes(st.status.state_bytes)} of state`),
      el("div", { class: "grid" }, checkpoints(st.status), exceptions(st.status)), versions(p, st)));
    return [head, stop, graph(p), throughput, ...stages, definition];
  }
  return [head, graph(p), el("div", { class: "grid" }, throughput, checkpoints(s)), tasks(s),
    el("div", { class: "grid" }, exceptions(s), versions(p)), definition].filter(Boolean);
}

function route() {
  const m = location.hash.match(/^#\/pipeline\/(.+)$/);
  return m ? decodeURIComponent(m[1]) : null;
}

async function refresh() {
  const view = document.getElementById("view"), updated = document.getElementById("updated");
  const name = route();
  try {
    const response = await fetch(name === null ? "/api/pipelines" : "/api/pipelines/" + encodeURIComponent(name));
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    // Keep what the user typed or was told across refreshes.
    const told = [...view.querySelectorAll(".action-result")]
      .filter(r => r.textContent && !r.classList.contains("muted")).map(r => [r.id, r.className, r.textContent]);
    const scrolls = [...view.querySelectorAll(".scroll, .exceptions")].map(n => n.scrollTop);
    view.replaceChildren(...(name === null ? [overview(body)] : pipelinePage(body)));
    [...view.querySelectorAll(".scroll, .exceptions")].forEach((n, i) => { n.scrollTop = scrolls[i] || 0; });
    for (const [id, className, text] of told) {
      const r = document.getElementById(id);
      if (r) { r.className = className; r.textContent = text; }
    }
    updated.textContent = (name === null ? body.pipelines.length + " pipeline(s)" : name) + ", updated " + new Date().toLocaleTimeString();
  } catch (e) {
    updated.textContent = "cannot reach weir serve: " + e.message;
  }
}

document.getElementById("token-form").addEventListener("submit", e => {
  e.preventDefault();
  const input = document.getElementById("token");
  sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  showTokenState();
  refresh();
});
window.addEventListener("hashchange", refresh);
showTokenState();
refresh();
setInterval(refresh, POLL_MS);
