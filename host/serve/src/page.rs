//! `GET /`: a status page for people. It reads `/api/pipelines` every two seconds and
//! shows each pipeline's state, UDF version and its last change (from the registry),
//! throughput over the last minutes as a small chart, watermark lag and errors. No build
//! step, no outside assets.

/// The page: one self-contained HTML document, its script and styles inline.
pub const PAGE: &str = r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>weir serve</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 2rem; color: #222; }
  h1 { font-size: 1.3rem; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid #ddd; vertical-align: middle; }
  th { font-weight: 600; background: #f6f6f6; }
  .state-running { color: #0a7d32; } .state-failed { color: #b00020; } .state-stopped, .state-finished { color: #666; }
  .error { color: #b00020; font-size: .9em; }
  code { font-size: .9em; }
  svg { display: block; }
  #updated { color: #888; font-size: .85em; }
  .history { color: #666; font-size: .8em; }
</style>
</head>
<body>
<h1>weir serve</h1>
<p id="updated">loading…</p>
<table>
  <thead><tr>
    <th>pipeline</th><th>state</th><th>UDF version</th><th>records/s</th><th>last minutes</th>
    <th>processed</th><th>watermark lag</th><th>keys</th><th>timers</th><th>dead letters</th><th>UDF errors</th>
  </tr></thead>
  <tbody id="pipelines"></tbody>
</table>
<script>
function text(tag, value, cls) {
  const el = document.createElement(tag);
  el.textContent = value;
  if (cls) el.className = cls;
  return el;
}
function rates(history) {
  const out = [];
  for (let i = 1; i < history.length; i++) {
    const dt = (history[i][0] - history[i - 1][0]) / 1000;
    out.push(dt > 0 ? (history[i][1] - history[i - 1][1]) / dt : 0);
  }
  return out.slice(-120);
}
function chart(values) {
  const w = 160, h = 32, ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h);
  svg.setAttribute("class", "chart");
  const max = Math.max(1, ...values);
  const points = values.map((v, i) =>
    `${(i / Math.max(1, values.length - 1)) * w},${h - (v / max) * (h - 2) - 1}`).join(" ");
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points);
  line.setAttribute("fill", "none"); line.setAttribute("stroke", "#3367d6"); line.setAttribute("stroke-width", "1.5");
  svg.appendChild(line);
  return svg;
}
function lag(ms) {
  if (ms === null || ms === undefined) return "–";
  if (Math.abs(ms) < 1000) return ms + " ms";
  if (Math.abs(ms) < 120000) return (ms / 1000).toFixed(1) + " s";
  return (ms / 60000).toFixed(1) + " min";
}
async function refresh() {
  try {
    const response = await fetch("/api/pipelines");
    const body = await response.json();
    const rows = document.getElementById("pipelines");
    rows.replaceChildren();
    for (const p of body.pipelines) {
      const s = p.status;
      const tr = document.createElement("tr");
      tr.dataset.pipeline = p.name;
      tr.appendChild(text("td", p.name, "name"));
      tr.appendChild(text("td", p.state, "state state-" + p.state));
      const version = document.createElement("td");
      version.className = "version";
      version.appendChild(text("span", "v" + (p.udf.version ?? "?"), "number"));
      version.appendChild(document.createTextNode(" "));
      version.appendChild(text("code", (p.udf.sha256 || "").slice(0, 12), "sha"));
      const last = (p.history || [])[(p.history || []).length - 1];
      if (last) {
        const when = new Date(last.at).toLocaleTimeString();
        version.appendChild(text("div", last.action + " v" + last.version + " at " + when, "history"));
      }
      tr.appendChild(version);
      tr.appendChild(text("td", Math.round(s.records_per_second).toString(), "rate"));
      const spark = document.createElement("td");
      spark.appendChild(chart(rates(s.history)));
      tr.appendChild(spark);
      tr.appendChild(text("td", s.processed.toString(), "processed"));
      tr.appendChild(text("td", lag(s.watermark_lag_ms), "lag"));
      tr.appendChild(text("td", s.keys.toString(), "keys"));
      tr.appendChild(text("td", (s.event_timers + s.processing_timers).toString(), "timers"));
      tr.appendChild(text("td", s.dead_letters.toString(), "dead-letters"));
      const errors = document.createElement("td");
      errors.className = "udf-errors";
      errors.appendChild(text("span", s.udf_errors.toString(), "count"));
      if (s.last_error) errors.appendChild(text("div", s.last_error, "error"));
      tr.appendChild(errors);
      rows.appendChild(tr);
    }
    document.getElementById("updated").textContent =
      body.pipelines.length + " pipeline(s), updated " + new Date().toLocaleTimeString();
  } catch (e) {
    document.getElementById("updated").textContent = "cannot reach weir serve: " + e;
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
"##;
