// PAN dashboard: one WebSocket to the dashboard server, which holds one PAN subscription per stream for
// every browser. The page says which streams it wants; frames carry the newest tuples of each.
"use strict";

const state = {
  config: null, ws: null, connects: 0, frames: 0, backoff: 250,
  latest: {},              // stream -> newest tuple
  shots: new Map(),        // shot number -> tuple
  heat: null,              // the HM tuple drawn
  delays: {},              // stream -> [[wall ms, delay ms], ...]
  network: null,
  problems: {},            // stream -> why the server cannot read it (e.g. a refused token), until it can
  dirty: false,
};
const $ = (id) => document.getElementById(id);
const PS = 1e12;
const END_OF_STREAM = 2 ** 62;  // the promise that ends a stream
const BANDS = ["standing", "trot", "low", "medium", "high", "sprint"];
// Opt-in timing hook for `pan bench dashboard`, off unless the page is opened with ?trace=STREAM,...: for every
// drawn match frame, each traced stream whose newest tuple changed, as [stream, ts, wall ms when drawn].
const TRACED = (new URLSearchParams(location.search).get("trace") || "").split(",").filter((s) => s).slice(0, 20);
const TRACE_MAX = 200000;  // entries kept until the benchmark collects them (window.panTrace.splice(0))
if (TRACED.length) { window.panTrace = []; window.panDraws = 0; }
const tracedTs = {};

// --- which streams the page wants --------------------------------------------------------------------

function heatStream() {
  return `HM_${$("hm-window").value}_${$("hm-grid").value}_${$("hm-player").value}`;
}

function delayStreams() {
  return $("delay-streams").value.split(",").map((s) => s.trim()).filter((s) => s).slice(0, 10);
}

function wanted() {
  const c = state.config, w = new Set(["ACTIVEBALL", "REFEREE", "SHOTS", "$network", "$delays"]);
  for (const p of c.players) {
    w.add(p); w.add(`BP_${p}`); w.add(`RUN_${p}`); w.add(`RUNAGG_${$("run-window").value}_${p}`);
  }
  for (const win of c.windows) for (const t of ["A", "B"]) w.add(`BP_${win}_${t}`);
  if ($("hm-show").checked) w.add(heatStream());
  for (const s of delayStreams()) w.add(s);
  return [...w];
}

function sendWanted() {
  if (state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify({ want: wanted() }));
}

// --- connection: reconnects by itself, without reloading the page -----------------------------------

function connect() {
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`);
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  ws.onopen = () => { state.backoff = 250; sendWanted(); };
  ws.onmessage = (event) => {
    const text = typeof event.data === "string" ? event.data : new TextDecoder().decode(event.data);
    const msg = JSON.parse(text);
    if (msg.hello) {
      state.connects += 1;
      const st = $("status");
      st.dataset.connected = "true"; st.dataset.server = msg.hello.server; st.dataset.connects = state.connects;
      st.textContent = `live (server ${msg.hello.server})`;
    } else if (msg.streams) {
      for (const [name, tuples] of Object.entries(msg.streams)) receive(name, tuples, msg.t);
      Object.assign(state.problems, msg.problems || {});
      showProblems();
      state.frames += 1;
      $("status").dataset.frames = state.frames;
      schedule();
    }
  };
  ws.onclose = () => {
    const st = $("status");
    st.dataset.connected = "false"; st.textContent = "reconnecting…";
    setTimeout(connect, state.backoff);
    state.backoff = Math.min(state.backoff * 2, 2000);
  };
}

function showProblems() {
  // The server cannot read some streams (PAN refused its token, an untrusted certificate): say so, not an empty page.
  const box = $("problem"), names = Object.keys(state.problems).sort();
  box.dataset.count = names.length;
  box.classList.toggle("hidden", !names.length);
  if (!names.length) { box.textContent = ""; return; }
  const first = state.problems[names[0]];
  box.dataset.first = first;
  box.textContent = `The dashboard cannot read ${names.length} stream(s) from PAN: ${first}` +
    (names.length > 1 ? ` (and ${names.length - 1} more)` : "");
}

function receive(name, tuples, wallMs) {
  delete state.problems[name];
  const last = tuples[tuples.length - 1];
  if (name === "$network") { state.network = last; return; }
  if (name === "$delays") {
    for (const [s, d] of Object.entries(last.delays_ms)) {
      const series = state.delays[s] || (state.delays[s] = []);
      series.push([last.ts, d]);
      if (series.length > 120) series.shift();
    }
    $("delay-ref").textContent = `against the arrival of ${last.reference}`;
    return;
  }
  if (name === "SHOTS") for (const t of tuples) state.shots.set(t.shot, t);
  if (name.startsWith("HM_")) state.heat = { stream: name, tuple: last };
  state.latest[name] = last;
}

function schedule() {
  if (!state.dirty) { state.dirty = true; requestAnimationFrame(draw); }
}

// --- drawing -----------------------------------------------------------------------------------------

function pitchTransform(canvas) {
  const p = state.config.pitch, m = 14;
  const s = Math.min((canvas.width - 2 * m) / (p.y_max - p.y_min), (canvas.height - 2 * m) / (p.x_max - p.x_min));
  // The long side (y) runs across the screen.
  return { s, toX: (y) => m + (y - p.y_min) * s, toY: (x) => m + (x - p.x_min) * s };
}

function drawPitch(ctx, T) {
  const p = state.config.pitch;
  ctx.strokeStyle = "#fff"; ctx.lineWidth = 2;
  ctx.strokeRect(T.toX(p.y_min), T.toY(p.x_min), (p.y_max - p.y_min) * T.s, (p.x_max - p.x_min) * T.s);
  ctx.beginPath(); ctx.moveTo(T.toX(0), T.toY(p.x_min)); ctx.lineTo(T.toX(0), T.toY(p.x_max)); ctx.stroke();
  ctx.beginPath(); ctx.arc(T.toX(0), T.toY((p.x_min + p.x_max) / 2), 9150 * T.s * 0.5, 0, 2 * Math.PI); ctx.stroke();
  ctx.lineWidth = 5;
  for (const g of p.goals) {
    ctx.beginPath(); ctx.moveTo(T.toX(g.y), T.toY(g.x_min)); ctx.lineTo(T.toX(g.y), T.toY(g.x_max)); ctx.stroke();
  }
}

// A heat-map tuple's dense grid, ppm per cell: the runs of its non-zero cells filled with its values. The
// browser's copy of workers/sparse_heatmap.py's dense(); the dashboard's browser test holds the two together.
function denseCells(t, size) {
  const cells = new Array(size).fill(0);
  const runs = t.runs || [], values = t.ppm || [];
  let at = 0;
  for (let r = 0; r + 1 < runs.length; r += 2) {
    for (let k = 0; k < runs[r + 1] && runs[r] + k < size; k++) cells[runs[r] + k] = values[at++];
  }
  return cells;
}

function drawHeat(ctx, T) {
  const h = state.heat;
  const info = $("heatmap");
  if (!h || !$("hm-show").checked || h.stream !== heatStream()) return;
  const grid = h.stream.split("_")[2], [nx, ny] = state.config.grids[grid], p = state.config.pitch;
  const cells = denseCells(h.tuple, nx * ny);
  const max = Math.max(1, ...cells);
  const dx = (p.x_max - p.x_min) / nx, dy = (p.y_max - p.y_min) / ny;
  for (let ix = 0; ix < nx; ix++) for (let iy = 0; iy < ny; iy++) {
    const v = cells[ix * ny + iy];
    if (!v) continue;
    ctx.fillStyle = `rgba(255, ${Math.round(220 - 200 * v / max)}, 0, ${0.15 + 0.6 * v / max})`;
    ctx.fillRect(T.toX(p.y_min + iy * dy), T.toY(p.x_min + ix * dx), dy * T.s + 0.5, dx * T.s + 0.5);
  }
  info.dataset.stream = h.stream; info.dataset.i = h.tuple.i; info.dataset.cells = cells.length;
  info.dataset.max = max; info.dataset.sum = cells.reduce((a, b) => a + b, 0);
  info.textContent = `${h.stream} #${h.tuple.i}`;
}

function drawShots(ctx, T) {
  const goals = state.config.pitch.goals;
  ctx.strokeStyle = "#ffeb3b"; ctx.lineWidth = 2; ctx.setLineDash([6, 4]);
  for (const s of [...state.shots.values()].slice(-5)) {
    // The projected path: along (vx, vy) from where the kick left, to the goal line it heads for.
    const goal = s.vy >= 0 ? goals.reduce((a, g) => (g.y > a.y ? g : a)) : goals.reduce((a, g) => (g.y < a.y ? g : a));
    const t = s.vy ? (goal.y - s.y) / s.vy : 0;
    ctx.beginPath(); ctx.moveTo(T.toX(s.y), T.toY(s.x)); ctx.lineTo(T.toX(s.y + s.vy * t), T.toY(s.x + s.vx * t));
    ctx.stroke();
  }
  ctx.setLineDash([]);
}

function drawMovers(ctx, T) {
  const positions = {};
  let players = 0;
  const dot = (name, t, color, r) => {
    ctx.fillStyle = color; ctx.beginPath(); ctx.arc(T.toX(t.y), T.toY(t.x), r, 0, 2 * Math.PI); ctx.fill();
    positions[name] = [t.x, t.y];
  };
  ctx.font = "10px sans-serif";
  for (const p of state.config.players) {
    const t = state.latest[p];
    if (!t) continue;
    dot(p, t, p[0] === "A" ? "#1e88e5" : "#e53935", 7);
    ctx.fillStyle = "#fff"; ctx.fillText(p, T.toX(t.y) + 8, T.toY(t.x) + 3);
    players += 1;
  }
  if (state.latest.REFEREE) dot("REFEREE", state.latest.REFEREE, "#111", 6);
  const ball = state.latest.ACTIVEBALL;
  if (ball) dot("BALL", ball, "#fff", 4);
  const canvas = $("pitch");
  canvas.dataset.positions = JSON.stringify(positions);
  canvas.dataset.players = players;
  canvas.dataset.ball = ball ? "1" : "0";
}

function clockText(ts) {
  const [h1, h2] = state.config.halves;
  const half = ts >= h2[0] ? 2 : 1, start = half === 2 ? h2[0] : h1[0];
  const s = Math.max(0, Math.floor((ts - start) / PS)) + (half === 2 ? 45 * 60 : 0);
  return `${half === 1 ? "1st" : "2nd"} ${String(Math.floor(s / 60)).padStart(2, "0")}:${String(s % 60).padStart(2, "0")}`;
}

function drawMatch() {
  const canvas = $("pitch"), ctx = canvas.getContext("2d"), T = pitchTransform(canvas);
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  drawPitch(ctx, T); drawHeat(ctx, T); drawShots(ctx, T); drawMovers(ctx, T);
  const ts = Math.max(0, ...state.config.players.map((p) => (state.latest[p] || {}).ts || 0));
  if (ts) { $("clock").textContent = clockText(ts); $("clock").dataset.ts = ts; }
  drawPossession(); drawPlayers(); drawShotList();
}

function drawPossession() {
  const box = $("possession");
  box.innerHTML = "";
  for (const win of state.config.windows) {
    const a = state.latest[`BP_${win}_A`], b = state.latest[`BP_${win}_B`];
    const pa = a ? a.time_percent : null, pb = b ? b.time_percent : null;
    const row = document.createElement("div");
    row.dataset.window = win; row.dataset.a = pa ?? ""; row.dataset.b = pb ?? "";
    const fmt = (v) => (v === null ? "–" : `${v.toFixed(1)}%`);
    row.innerHTML = `<span class="bar-label">${win}</span><span class="bar" style="display:inline-flex">` +
      `<span class="a" style="width:${pa ?? 0}%">A ${fmt(pa)}</span>` +
      `<span class="b" style="width:${pb ?? 0}%">B ${fmt(pb)}</span></span>`;
    box.appendChild(row);
  }
}

function drawPlayers() {
  const body = $("players").tBodies[0], win = $("run-window").value;
  const rows = [];
  for (const p of state.config.players) {
    const bp = state.latest[`BP_${p}`] || {}, run = state.latest[`RUN_${p}`] || {};
    const agg = state.latest[`RUNAGG_${win}_${p}`] || {};
    const cell = (v, d = 0) => (typeof v === "number" ? v.toFixed(d) : "–");
    const total = BANDS.reduce((sum, b) => sum + (agg[`${b}_distance`] || 0), 0);
    rows.push(`<tr data-player="${p}"><td>${p} ${state.config.names[p] || ""}</td><td>${cell(bp.hits)}</td>` +
      `<td>${cell(bp.time_ps === undefined ? undefined : bp.time_ps / PS, 1)} s</td><td>${run.intensity ?? "–"}</td>` +
      `<td>${cell(run.speed, 1)}</td>` + BANDS.map((b) => `<td>${cell(agg[`${b}_distance`])}</td>`).join("") +
      `<td>${cell(total)}</td></tr>`);
  }
  body.innerHTML = rows.join("");
}

function drawShotList() {
  const list = $("shots"), shots = [...state.shots.values()].slice(-10).reverse();
  list.dataset.count = state.shots.size;
  list.innerHTML = shots.map((s) => `<li>shot ${s.shot} by ${s.player} at ${clockText(s.ts)}, ` +
    `${(s.v / 1e6 * 3.6).toFixed(0)} km/h</li>`).join("") || "<li>none yet</li>";
}

function drawNetwork() {
  const net = state.network;
  if (!net) return;
  const streams = Object.entries(net.streams).sort(([a], [b]) => a.localeCompare(b));
  $("net-summary").textContent = `${streams.length} streams` + (net.errors.length ? ` — ${net.errors.join("; ")}` : "");
  $("net-streams").tBodies[0].innerHTML = streams.map(([name, pubs]) => `<tr data-stream="${name}"><td>${name}</td><td>` +
    pubs.map((p) => `${p.rep ? "repeater" : "producer"} L${p.lvl} ${p.host}:${p.port}`).join(", ") + "</td></tr>").join("");
  const rows = [];
  for (const [endpoint, w] of Object.entries(net.workers).sort((a, b) => (a[1].worker || "").localeCompare(b[1].worker || ""))) {
    if (w.error) { rows.push(`<tr><td>${endpoint}</td><td colspan="6" class="err">${w.error}</td></tr>`); continue; }
    const inputs = inputSummary(w.inputs || {});
    const units = orderingUnits(w.component || {});
    const k = units.map((u) => u.k).join(", ");
    const wms = Object.values(w.outputs || {}).map((o) => (o.meta || {}).wm).filter((v) => typeof v === "number");
    const low = Math.min(...wms);
    const wm = !wms.length ? "" : low >= END_OF_STREAM ? "ended" : `${clockText(low)} (game)`;
    rows.push(`<tr data-worker="${w.worker}" data-type="${w.type}" data-k="${k}"><td>${w.worker}</td><td>${w.type}</td>` +
      `<td>${endpoint}</td><td>${inputs || "–"}</td><td>${k || "–"}</td><td>${wm || "–"}</td>` +
      `<td>${Object.keys(w.outputs || {}).length}</td></tr>`);
  }
  $("net-workers").tBodies[0].innerHTML = rows.join("");
}

function sourceText(source) {
  if (!source || typeof source !== "object") return "looking";
  return `${source.host}:${source.port}` + (source.rep ? ` (repeater L${source.lvl})` : "");
}

function inputSummary(inputs) {
  // One line per source: how many inputs it serves and their missed tuples and failovers in sum.
  const bySource = new Map();
  for (const [name, i] of Object.entries(inputs)) {
    const key = sourceText(i.source), row = bySource.get(key) || { names: [], missed: 0, failovers: 0 };
    row.names.push(name); row.missed += i.missed || 0; row.failovers += i.failovers || 0;
    bySource.set(key, row);
  }
  return [...bySource.entries()].map(([source, r]) => `<span title="${r.names.join(" ")}">` +
    `${r.names.length > 3 ? r.names.length + " inputs" : r.names.join(", ")} ← ${source}: ` +
    `<span class="${r.missed ? "err" : ""}">${r.missed} missed</span>, ${r.failovers} failovers</span>`).join("<br>");
}

function orderingUnits(component) {
  // An ordered worker reports its ordering unit under "ordering" (k, clk, ...); its watermark is in its outputs' meta.
  const found = [];
  const visit = (o) => {
    if (!o || typeof o !== "object") return;
    if ("k" in o) { found.push({ k: o.k, clk: o.clk }); return; }
    for (const v of Object.values(o)) visit(v);
  };
  visit(component.ordering);
  return found;
}

function drawDelays() {
  const box = $("delays"), names = delayStreams();
  box.innerHTML = names.map((s) => {
    const series = state.delays[s] || [];
    const last = series.length ? series[series.length - 1][1] : null;
    const max = Math.max(1, ...series.map((p) => p[1]));
    const points = series.map((p, n) => `${n * 2},${40 - (38 * p[1]) / max}`).join(" ");
    return `<span class="spark" data-stream="${s}" data-delay="${last ?? ""}">${s}: ${last === null ? "–" : last + " ms"}<br>` +
      `<svg width="240" height="42"><polyline fill="none" stroke="#1e88e5" points="${points}"/></svg></span>`;
  }).join("");
}

function draw() {
  state.dirty = false;
  if (!$("view-match").classList.contains("hidden")) { drawMatch(); if (TRACED.length) trace(); }
  else { drawNetwork(); drawDelays(); }
}

function trace() {
  const at = performance.timeOrigin + performance.now();  // the drawing is done; the compositor shows it next
  window.panDraws += 1;
  for (const s of TRACED) {
    const t = state.latest[s];
    if (!t || t.ts === tracedTs[s] || window.panTrace.length >= TRACE_MAX) continue;
    tracedTs[s] = t.ts;
    window.panTrace.push([s, t.ts, at]);
  }
}

// --- controls ----------------------------------------------------------------------------------------

function fill(select, values, chosen) {
  select.innerHTML = values.map((v) => `<option${v === chosen ? " selected" : ""}>${v}</option>`).join("");
}

async function start() {
  state.config = await (await fetch("/config")).json();
  const c = state.config;
  fill($("hm-player"), c.players, c.players[1]);
  fill($("hm-grid"), Object.keys(c.grids), "16x25");
  fill($("hm-window"), c.heatmap_windows, "wholeGame");
  fill($("run-window"), c.windows, "wholeGame");
  for (const id of ["hm-player", "hm-grid", "hm-window", "hm-show", "run-window"]) {
    $(id).addEventListener("change", () => { state.heat = null; sendWanted(); schedule(); });
  }
  $("delay-streams").addEventListener("change", sendWanted);
  for (const tab of document.querySelectorAll(".tab")) {
    tab.addEventListener("click", () => {
      for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t === tab);
      for (const v of document.querySelectorAll(".view")) v.classList.toggle("hidden", v.id !== `view-${tab.dataset.view}`);
      schedule();
    });
  }
  connect();
}

window.panPageLoad = Date.now();  // a test can tell a reconnect from a reload
start();
