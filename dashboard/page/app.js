// lathed dashboard: polls /api/state every second and redraws; a job's best records every
// few seconds while it is open; the tuning curve of the task selected in each open job.
// Everything shown from the daemon goes through esc() (workloads, hosts and messages are
// arbitrary text). No external fetches.
"use strict";

const STATE_MS = 1000;
const RECORDS_MS = 5000;
const CURVE_MS = 3000;

const ui = {
  state: null,
  lastOk: 0,
  failing: "",
  open: new Map(),       // job id -> true/false (user's choice; default: open while running)
  selected: new Map(),   // job id -> selected task index
  records: new Map(),    // job id -> {at, data}
  curves: new Map(),     // "job|task" -> {at, data}
  cancelling: new Set(),
  liveRank: new Map(),   // job id -> its rank among the jobs still going (newest first)
  drawn: new WeakMap(),  // element -> the HTML it shows (unchanged parts are not redrawn)
  redrawPending: false,
};
// Figures for tests and for anyone curious: how long the last redraw took.
window.latheStats = { renders: 0, lastRenderMs: 0, maxRenderMs: 0, lastFetchMs: 0 };

function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}

function fmtLatency(us) {
  if (us == null || !(us > 0)) return "—";
  if (us < 1000) return us.toFixed(1) + " µs";
  if (us < 1e6) return (us / 1000).toFixed(2) + " ms";
  return (us / 1e6).toFixed(2) + " s";
}
function fmtGflops(g) { return g == null || !(g > 0) ? "—" : g.toFixed(1); }
// One formatter each: toLocaleString() builds a new one per call, which hundreds of workers
// per redraw make the slowest part of the page.
const NUMBER = new Intl.NumberFormat("en-US");
const DATE_TIME = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "2-digit", day: "2-digit",
  hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false,
});
const TIME = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
function fmtInt(n) { return NUMBER.format(Number(n || 0)); }
function fmtDuration(s) {
  if (s == null) return "—";
  s = Math.max(0, Math.round(s));
  if (s < 60) return s + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " min " + String(s % 60).padStart(2, "0") + " s";
  const h = Math.floor(m / 60);
  if (h < 48) return h + " h " + String(m % 60).padStart(2, "0") + " min";
  return Math.floor(h / 24) + " d " + (h % 24) + " h";
}
function fmtAgo(ms, now) {
  if (!ms) return "never";
  const s = (now - ms) / 1000;
  if (s < 1) return "just now";
  return fmtDuration(s) + " ago";
}
function fmtTime(ms) {
  if (!ms) return "—";
  return DATE_TIME.format(new Date(ms));
}
function pct(done, total) { return total > 0 ? Math.min(100, (100 * done) / total) : 0; }
function bar(done, total, cls) {
  // <progress>, not a styled div: the page's CSP allows no inline style attributes.
  return `<progress class="bar ${cls || ""}" max="${Math.max(total, 1)}" value="${Math.min(done, Math.max(total, 1))}">${pct(done, total).toFixed(0)}%</progress>`;
}

async function getJson(url, options) {
  const res = await fetch(url, Object.assign({ credentials: "same-origin", cache: "no-store" }, options || {}));
  if (res.status === 401) {
    // The session expired or the daemon restarted: back to the login form.
    window.location.href = "/login";
    throw new Error("unauthenticated");
  }
  let body = null;
  try { body = await res.json(); } catch (e) { body = null; }
  if (!res.ok) throw new Error((body && body.error) || res.status + " " + res.statusText);
  return body;
}

// --- summary and workers ---

function renderSummary(st) {
  const c = st.counts;
  const cards = [
    ["Workers busy", c.workers_busy], ["Workers idle", c.workers_idle], ["Workers lost", c.workers_lost],
    ["Jobs running", c.jobs_running], ["Jobs queued", c.jobs_queued], ["Tasks queued", c.tasks_queued],
  ];
  setHtml(document.getElementById("summary"), cards
    .map(([k, v]) => `<div class="card"><div class="label">${esc(k)}</div><div class="value">${fmtInt(v)}</div></div>`)
    .join(""));
}

function leaseText(w, now) {
  if (!w.leased_tasks) return '<span class="muted">—</span>';
  const left = (w.lease_deadline_ms - now) / 1000;
  const jobs = (w.lease_jobs || []).map(esc).join(", ");
  return `${fmtInt(w.leased_tasks)} task${w.leased_tasks === 1 ? "" : "s"} of ${jobs}` +
    ` <span class="muted">(deadline ${left >= 0 ? "in " + fmtDuration(left) : fmtDuration(-left) + " ago"})</span>`;
}

function renderWorkers(st) {
  const rows = st.workers.map((w) => `<tr data-worker="${esc(w.id)}" data-state="${esc(w.state)}">
      <td class="mono">${esc(w.id)}</td>
      <td>${esc(w.host)}</td>
      <td class="dc">${esc(w.device_class)}</td>
      <td><span class="pill s-${esc(w.state)}">${esc(w.state)}</span></td>
      <td class="num">${fmtInt(w.measured)}</td>
      <td title="${esc(fmtTime(w.last_seen_ms))}">${esc(fmtAgo(w.last_seen_ms, st.now_ms))}</td>
      <td>${leaseText(w, st.now_ms)}</td>
    </tr>`);
  const html = rows.length ? rows.join("") : '<tr><td colspan="7" class="empty">No worker has registered yet: start <code>lathe-worker --tuner HOST:PORT</code>.</td></tr>';
  setHtml(document.querySelector("#workers tbody"), html);
  const c = st.counts;
  document.getElementById("workers-count").textContent =
    `${st.workers.length} registered · ${c.workers_busy} busy · ${c.workers_idle} idle · ${c.workers_lost} lost`;
}

// --- jobs ---

// Open unless the user closed it: the newest OPEN_LIVE jobs still going (each open job costs
// a curve and its records every few seconds; a fleet may run dozens).
const OPEN_LIVE = 4;
function isOpen(job) {
  if (ui.open.has(job.id)) return ui.open.get(job.id);
  return (ui.liveRank.get(job.id) ?? Infinity) < OPEN_LIVE;
}

// "op:k=v,..." with the op in bold and a line-break opportunity after every comma.
function workloadHtml(w) {
  const colon = w.indexOf(":");
  const op = colon < 0 ? w : w.slice(0, colon);
  const rest = colon < 0 ? "" : w.slice(colon + 1);
  return `<b>${esc(op)}</b>:` + rest.split(",").map(esc).join(",<wbr>");
}

// A task's trials: of its own target, or (a multi-task job, whose scheduler spreads one
// budget and gives tasks no target) its share of the job's trials so far.
function trialsCell(job, t) {
  if (t.trials_target > 0) {
    return `<div class="trials"><span class="txt num">${fmtInt(t.trials_done)} / ${fmtInt(t.trials_target)}</span>${bar(t.trials_done, t.trials_target)}</div>`;
  }
  const share = pct(t.trials_done, job.trials_done);
  return `<div class="trials" title="${share.toFixed(0)}% of the job's trials so far"><span class="txt num">${fmtInt(t.trials_done)} (${share.toFixed(0)}%)</span>${bar(t.trials_done, job.trials_done)}</div>`;
}

function taskRow(job, t, i) {
  const errs = Object.entries(t.errors || {}).filter(([k]) => k !== "ok");
  const errText = errs.length ? errs.map(([k, n]) => `${esc(k)} ${fmtInt(n)}`).join(", ") : "";
  const retime = t.remeasured || t.remeasure_failed || t.remeasure_pending
    ? `${t.remeasured} done${t.remeasure_failed ? ", " + t.remeasure_failed + " failed" : ""}${t.remeasure_pending ? ", " + t.remeasure_pending + " pending" : ""}`
    : "—";
  const sel = ui.selected.get(job.id) === i ? " selected" : "";
  return `<tr class="task${sel}" data-job="${esc(job.id)}" data-task="${i}" tabindex="0" aria-selected="${sel ? "true" : "false"}">
      <td class="mono workload">${workloadHtml(t.workload)}</td>
      <td class="num">${Number(t.weight).toPrecision(3).replace(/\.?0+$/, "")}</td>
      <td>${trialsCell(job, t)}</td>
      <td class="num">${fmtLatency(t.best_latency_us)}</td>
      <td class="num">${t.share == null ? "—" : (100 * t.share).toFixed(1) + "%"}</td>
      <td class="num">${fmtGflops(t.best_gflops)}</td>
      <td class="errors">${errText}</td>
      <td>${retime}</td>
    </tr>`;
}

// The objective over the job's trials (JobStatus.objective_history) as a small line: where it
// started, where it is; empty with fewer than two points.
function objectiveSpark(job) {
  const h = job.objective_history || [];
  if (h.length < 2) return "";
  const w = 120, ht = 22;
  const x0 = h[0].trials_done, x1 = Math.max(h[h.length - 1].trials_done, x0 + 1);
  const ys = h.map((p) => p.objective_us);
  const lo = Math.min(...ys), hi = Math.max(...ys);
  const sx = (x) => ((x - x0) / (x1 - x0)) * (w - 2) + 1;
  const sy = (y) => (hi > lo ? (1 - (y - lo) / (hi - lo)) * (ht - 4) + 2 : ht / 2);
  const pts = h.map((p) => `${sx(p.trials_done).toFixed(1)},${sy(p.objective_us).toFixed(1)}`).join(" ");
  const title = `from ${fmtLatency(h[0].objective_us)} at ${fmtInt(h[0].trials_done)} trials to ${fmtLatency(h[h.length - 1].objective_us)} at ${fmtInt(h[h.length - 1].trials_done)}`;
  return ` <svg class="spark" width="${w}" height="${ht}" viewBox="0 0 ${w} ${ht}" role="img" aria-label="${esc(title)}"><title>${esc(title)}</title><polyline fill="none" stroke="currentColor" stroke-width="1.5" points="${pts}"/></svg>`;
}

// The model in view: the objective (the model's estimated latency, the sum of weight x best
// latency) over the job's wall-clock time, a step per point of JobStatus.objective_history
// (the daemon keeps it in the store, so it spans restarts), held until now while the job runs.
function objectiveChartHtml(job, now) {
  const h = job.objective_history || [];
  const head = "<h3>Objective over time: the model's estimated latency (Σ weight × best latency)</h3>";
  if (!h.length) {
    return `<div class="chart objective-chart">${head}<div class="note">no objective yet: every task needs an ok record</div></div>`;
  }
  const W = 620, H = 200, L = 64, R = 16, T = 14, B = 34;
  const t0 = Math.min(job.created_at_ms || h[0].at_ms, h[0].at_ms);
  const live = job.state === "running" || job.state === "queued";
  const tEnd = Math.max(h[h.length - 1].at_ms, live ? now : job.updated_at_ms || 0, t0 + 1000);
  const ys = h.map((p) => p.objective_us);
  let ymin = Math.min(...ys), ymax = Math.max(...ys);
  if (ymax - ymin < ymax * 0.02) { ymin *= 0.9; ymax *= 1.1; }
  const pad = (ymax - ymin) * 0.08;
  ymin = Math.max(0, ymin - pad);
  ymax += pad;
  const span = (tEnd - t0) / 1000;  // seconds
  const unit = span >= 7200 ? [3600, "h"] : span >= 120 ? [60, "min"] : [1, "s"];
  const x = (ms) => L + ((W - L - R) * (ms - t0)) / (tEnd - t0);
  const y = (v) => T + ((H - T - B) * (ymax - v)) / (ymax - ymin || 1);
  let d = "";
  h.forEach((p, k) => {
    d += k === 0 ? `M${x(p.at_ms).toFixed(1)},${y(p.objective_us).toFixed(1)}` : `H${x(p.at_ms).toFixed(1)}V${y(p.objective_us).toFixed(1)}`;
  });
  d += `H${x(tEnd).toFixed(1)}`;
  let g = "";
  for (const v of niceTicks(ymin, ymax, 4)) {
    g += `<line class="gridline" x1="${L}" x2="${W - R}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}"/>` +
      `<text x="${L - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${esc(fmtLatency(v))}</text>`;
  }
  for (const t of niceTicks(0, span / unit[0], 5)) {
    g += `<text x="${x(t0 + t * unit[0] * 1000).toFixed(1)}" y="${H - B + 16}" text-anchor="middle">${+t.toFixed(2)}</text>`;
  }
  g += `<text x="${(L + W - R) / 2}" y="${H - 4}" text-anchor="middle">${unit[1]} since the job was created</text>`;
  const dots = h.map((p) => `<circle class="dot" cx="${x(p.at_ms).toFixed(1)}" cy="${y(p.objective_us).toFixed(1)}" r="2.6"><title>${esc(fmtTime(p.at_ms))}: ${esc(fmtLatency(p.objective_us))} after ${fmtInt(p.trials_done)} trials</title></circle>`).join("");
  const first = h[0], last = h[h.length - 1];
  const fell = first.objective_us > 0 ? (100 * (first.objective_us - last.objective_us)) / first.objective_us : 0;
  const note = h.length < 2
    ? `${esc(fmtLatency(last.objective_us))} since ${esc(fmtTime(last.at_ms))}`
    : `${esc(fmtLatency(first.objective_us))} at ${fmtInt(first.trials_done)} trials → ${esc(fmtLatency(last.objective_us))} at ${fmtInt(last.trials_done)} trials (${fell.toFixed(1)}% lower, ${h.length} points)`;
  return `<div class="chart objective-chart">${head}<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="The objective over time">
      ${g}<line class="axis" x1="${L}" x2="${L}" y1="${T}" y2="${H - B}"/><line class="axis" x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}"/>
      <path class="curve objective" d="${d}"/>${dots}</svg><div class="note">${note}</div></div>`;
}

function jobHtml(job, now) {
  const open = isOpen(job);
  const live = job.state === "running" || job.state === "queued";
  const stateLabel = job.state === "running" ? job.phase : job.state;
  const eta = job.state !== "running" ? "—"
    : job.phase === "re-timing" ? "re-timing the best records"
    : job.eta_s == null ? "estimating…" : fmtDuration(job.eta_s);
  const rate = job.rate_per_s == null ? "—" : (job.rate_per_s * 60).toFixed(1) + " trials/min";
  let html = `<article class="panel job" data-job="${esc(job.id)}" data-state="${esc(job.state)}" data-done="${job.trials_done}" data-budget="${job.trials_budget}">
    <div class="job-head">
      <span class="id mono">${esc(job.id)}</span>
      <span class="pill s-${esc(stateLabel)}">${esc(stateLabel)}</span>
      <span class="meta">${esc(job.device_class)}</span>
      <span class="meta" title="${esc(fmtTime(job.created_at_ms))}">created ${esc(fmtAgo(job.created_at_ms, now))}</span>
      <span class="toggle">
        ${live ? `<button class="danger cancel" data-job="${esc(job.id)}" ${ui.cancelling.has(job.id) ? "disabled" : ""}>Cancel</button>` : ""}
        <button class="expand" data-job="${esc(job.id)}" aria-expanded="${open}">${open ? "Hide tasks" : "Show tasks"}</button>
      </span>
    </div>
    <div class="job-stats">
      <span><span class="k">trials</span><b class="job-trials">${fmtInt(job.trials_done)} / ${fmtInt(job.trials_budget)}</b> (${pct(job.trials_done, job.trials_budget).toFixed(0)}%)</span>
      <span><span class="k">objective</span><b>${fmtLatency(job.objective_us)}</b>${objectiveSpark(job)}</span>
      <span><span class="k">rate</span><b>${esc(rate)}</b></span>
      <span><span class="k">time left</span><b class="eta">${esc(eta)}</b></span>
      <span><span class="k">tasks</span><b>${job.tasks.length}</b></span>
    </div>
    ${bar(job.trials_done, job.trials_budget, "big-bar")}
    ${job.message ? `<div class="job-message">${esc(job.message)}</div>` : ""}`;
  if (open) {
    if (job.tasks.length > 1) html += objectiveChartHtml(job, now);
    html += `<div class="wrap tasks"><table>
      <thead><tr><th>Task (workload)</th><th class="num">Weight</th><th>Trials</th><th class="num">Best latency</th><th class="num" title="weight x best latency / objective">Share</th><th class="num">GFLOP/s</th><th>Errors</th><th>Re-timing</th></tr></thead>
      <tbody>${job.tasks.map((t, i) => taskRow(job, t, i)).join("")}</tbody></table></div>`;
    const sel = ui.selected.get(job.id);
    if (sel != null && job.tasks[sel]) html += detailHtml(job, sel);
  }
  return html + "</article>";
}

function renderJobs(st) {
  const el = document.getElementById("jobs");
  ui.liveRank.clear();
  for (const job of st.jobs) {
    if (!ui.selected.has(job.id) && job.tasks.length) ui.selected.set(job.id, 0);
    if (job.state === "running" || job.state === "queued") ui.liveRank.set(job.id, ui.liveRank.size);
  }
  if (!st.jobs.length) {
    setHtml(el, '<div class="panel empty">No jobs yet: submit one with <code>lathe tune --tuner HOST:PORT --workload SPEC</code> or the Python client.</div>');
  } else {
    // One card per job: the container is rebuilt when the jobs shown change, else only the
    // cards whose contents changed.
    const ids = st.jobs.map((j) => j.id).join("\n");
    if (el.dataset.ids !== ids) {
      el.innerHTML = st.jobs.map((j) => `<div class="job-slot" data-slot="${esc(j.id)}"></div>`).join("");
      el.dataset.ids = ids;
    }
    const slots = el.children;
    st.jobs.forEach((j, k) => setHtml(slots[k], jobHtml(j, st.now_ms)));
  }
  const c = st.counts;
  document.getElementById("jobs-count").textContent =
    `${c.jobs_running} running · ${c.jobs_queued} queued · ${c.jobs_finished} finished` +
    (c.jobs_finished > st.jobs.filter((j) => !["running", "queued"].includes(j.state)).length ? " (newest shown)" : "");
}

// Sets an element's HTML unless it already shows exactly that.
function setHtml(el, html) {
  if (ui.drawn.get(el) === html) return;
  el.innerHTML = html;
  ui.drawn.set(el, html);
}

// --- a task's curve and best record ---

function detailHtml(job, i) {
  const task = job.tasks[i];
  const curve = ui.curves.get(job.id + "|" + i);
  const rec = ui.records.get(job.id);
  const record = rec && rec.data && rec.data.records ? rec.data.records[i] : null;
  return `<div class="detail" data-job="${esc(job.id)}" data-task="${i}">
      <div class="chart"><h3>Tuning curve: best latency over the trials</h3>${curve ? chartSvg(curve.data) : '<div class="note">loading…</div>'}</div>
      <div class="record"><h3>Best record</h3>${record ? recordHtml(record) : rec && rec.error ? `<div class="error">${esc(rec.error)}</div>` : '<div class="note">loading…</div>'}</div>
    </div>`;
}

function niceTicks(lo, hi, n) {
  const span = hi - lo;
  if (!(span > 0)) return [lo];
  const step0 = span / n;
  const mag = Math.pow(10, Math.floor(Math.log10(step0)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= step0) || step0;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(v);
  return out;
}

function chartSvg(c) {
  if (!c || c.error) return `<div class="error">${esc(c && c.error)}</div>`;
  const pts = c.points || [];
  const W = 620, H = 240, L = 64, R = 16, T = 14, B = 34;
  if (!pts.length) {
    return `<div class="note">${c.trials ? fmtInt(c.trials) + " trials, none ok yet" : "no trial measured yet"}</div>`;
  }
  const n = Math.max(c.trials, 1);
  let ymax = Math.max(...pts.map((p) => p[1]));
  let ymin = Math.min(...pts.map((p) => p[1]));
  if (c.library && c.library.latency_us) {
    ymax = Math.max(ymax, c.library.latency_us);
    ymin = Math.min(ymin, c.library.latency_us);
  }
  if (ymax - ymin < ymax * 0.02) {  // one level so far: show it mid-height
    ymin *= 0.9;
    ymax *= 1.1;
  }
  const pad = (ymax - ymin) * 0.08;
  ymin = Math.max(0, ymin - pad);
  ymax = ymax + pad;
  const x = (t) => L + ((W - L - R) * t) / n;
  const y = (v) => T + ((H - T - B) * (ymax - v)) / (ymax - ymin || 1);
  let d = "";
  pts.forEach((p, k) => {
    d += k === 0 ? `M${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}` : `H${x(p[0]).toFixed(1)}V${y(p[1]).toFixed(1)}`;
  });
  d += `H${x(n).toFixed(1)}`;
  let g = "";
  for (const v of niceTicks(ymin, ymax, 4)) {
    g += `<line class="gridline" x1="${L}" x2="${W - R}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}"/>` +
      `<text x="${L - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${esc(fmtLatency(v))}</text>`;
  }
  for (const t of niceTicks(0, n, 5)) {
    g += `<text x="${x(t).toFixed(1)}" y="${H - B + 16}" text-anchor="middle">${fmtInt(t)}</text>`;
  }
  g += `<text x="${(L + W - R) / 2}" y="${H - 4}" text-anchor="middle">trials (in the order measured)</text>`;
  let extra = "";
  if (c.job_start_trial) {
    const xs = x(c.job_start_trial - 1).toFixed(1);
    extra += `<line class="start" x1="${xs}" x2="${xs}" y1="${T}" y2="${H - B}"/><text class="start-label" x="${(+xs + 4)}" y="${T + 10}">this job</text>`;
  }
  if (c.library && c.library.latency_us) {
    const yl = y(c.library.latency_us).toFixed(1);
    extra += `<line class="lib" x1="${L}" x2="${W - R}" y1="${yl}" y2="${yl}"/>` +
      `<text class="lib-label" x="${W - R - 4}" y="${(+yl - 5)}" text-anchor="end">${esc(c.library.name)} ${fmtGflops(c.library.gflops)} GFLOP/s</text>`;
  }
  const last = pts[pts.length - 1];
  const dots = pts.map((p) => `<circle class="dot" cx="${x(p[0]).toFixed(1)}" cy="${y(p[1]).toFixed(1)}" r="2.6"><title>trial ${fmtInt(p[0])}: ${esc(fmtLatency(p[1]))}, ${fmtGflops(p[2])} GFLOP/s</title></circle>`).join("");
  const note = `${fmtInt(c.trials)} trials (${fmtInt(c.ok)} ok), best ${esc(fmtLatency(last[1]))} = ${fmtGflops(last[2])} GFLOP/s` +
    (c.library ? `; ${esc(c.library.name)}: ${fmtGflops(c.library.gflops)} GFLOP/s (lathe ${(last[2] / c.library.gflops).toFixed(2)}x)` : `; ${esc(c.library_note || "")}`);
  return `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="Best latency over the trials">
      ${g}<line class="axis" x1="${L}" x2="${L}" y1="${T}" y2="${H - B}"/><line class="axis" x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}"/>
      ${extra}<path class="curve" d="${d}"/>${dots}</svg><div class="note">${note}</div>`;
}

function recordHtml(r) {
  if (!r.found) return `<div class="explanation">${esc(r.explanation)}</div>`;
  return `<dl>
      <dt>latency</dt><dd>${fmtLatency(r.latency_us)}</dd>
      <dt>GFLOP/s</dt><dd>${fmtGflops(r.gflops)}</dd>
      <dt>measured</dt><dd>${esc(fmtTime(r.measured_at_ms))} by <span class="mono">${esc(r.worker)}</span></dd>
      <dt>device class</dt><dd>${esc(r.device_class)}</dd>
    </dl>
    <div class="explanation">${esc(r.explanation)}</div>
    <details><summary>schedule (${(r.schedule || "").trim().split("\n").length} primitives)</summary><div class="schedule">${esc(r.schedule)}</div></details>`;
}

// --- polling ---

// A job's records and its selected task's curve are fetched again when the job has measured
// more since they were (at most once a second), and every few seconds regardless.
function stale(entry, progress, every, now) {
  if (!entry) return true;
  if (now - entry.at < 1000) return false;
  return entry.progress !== progress || now - entry.at > every;
}

async function refreshDetails(st) {
  const now = Date.now();
  const jobs = st.jobs.filter((j) => isOpen(j));
  for (const job of jobs) {
    const live = job.state === "running" || job.state === "queued";
    const rec = ui.records.get(job.id);
    const best = job.tasks.map((t) => t.best_latency_us).join(",");
    if (!rec || (live && stale(rec, best, RECORDS_MS, now))) {
      ui.records.set(job.id, Object.assign(rec || {}, { at: now, progress: best }));
      getJson("/api/records?job=" + encodeURIComponent(job.id))
        .then((data) => { ui.records.set(job.id, { at: now, progress: best, data }); scheduleRedraw(); })
        .catch((e) => { ui.records.set(job.id, { at: now, progress: best, error: e.message }); });
    }
    const i = ui.selected.get(job.id);
    if (i == null || !job.tasks[i]) continue;
    const key = job.id + "|" + i;
    const cur = ui.curves.get(key);
    const done = job.tasks[i].trials_done;
    if (!cur || (live && stale(cur, done, CURVE_MS, now))) {
      ui.curves.set(key, Object.assign(cur || {}, { at: now, progress: done }));
      const q = new URLSearchParams({ workload: job.tasks[i].workload, device_class: job.device_class, job: job.id });
      getJson("/api/curve?" + q)
        .then((data) => { ui.curves.set(key, { at: now, progress: done, data }); scheduleRedraw(); })
        .catch((e) => { ui.curves.set(key, { at: now, progress: done, data: { error: e.message } }); scheduleRedraw(); });
    }
  }
}

function renderStatus() {
  const el = document.getElementById("status");
  if (ui.failing) {
    el.className = "status down";
    el.textContent = `lathed unreachable (${ui.failing}); retrying — last update ${ui.lastOk ? fmtAgo(ui.lastOk, Date.now()) : "never"}`;
  } else {
    el.className = "status";
    el.textContent = `live · updated ${TIME.format(new Date(ui.lastOk))}`;
  }
}

// Answers arriving together are drawn together, once per frame.
function scheduleRedraw() {
  if (ui.redrawPending) return;
  ui.redrawPending = true;
  requestAnimationFrame(() => { ui.redrawPending = false; redraw(); });
}

function redraw() {
  if (!ui.state) return;
  const t0 = performance.now();
  renderSummary(ui.state);
  renderJobs(ui.state);
  renderWorkers(ui.state);
  renderStatus();
  const ms = performance.now() - t0;
  const s = window.latheStats;
  s.renders += 1;
  s.lastRenderMs = ms;
  s.maxRenderMs = Math.max(s.maxRenderMs, ms);
}

async function poll() {
  try {
    const t0 = performance.now();
    ui.state = await getJson("/api/state");
    window.latheStats.lastFetchMs = performance.now() - t0;
    ui.lastOk = Date.now();
    ui.failing = "";
    redraw();
    refreshDetails(ui.state);
  } catch (e) {
    ui.failing = e.message;
    renderStatus();
  }
  setTimeout(poll, STATE_MS);
}

// --- actions ---

document.addEventListener("click", async (ev) => {
  const cancel = ev.target.closest("button.cancel");
  if (cancel) {
    const id = cancel.dataset.job;
    if (!window.confirm(`Cancel job ${id}? Its results so far are kept.`)) return;
    ui.cancelling.add(id);
    cancel.disabled = true;
    try {
      await getJson(`/api/jobs/${encodeURIComponent(id)}/cancel`, { method: "POST", headers: { "X-Lathe-Request": "1" } });
      ui.state = await getJson("/api/state");
      redraw();
    } catch (e) {
      window.alert(`Cancelling ${id} failed: ${e.message}`);
    } finally {
      ui.cancelling.delete(id);
    }
    return;
  }
  const expand = ev.target.closest("button.expand");
  if (expand) {
    const job = ui.state.jobs.find((j) => j.id === expand.dataset.job);
    if (job) ui.open.set(job.id, !isOpen(job));
    redraw();
    refreshDetails(ui.state);
    return;
  }
  const row = ev.target.closest("tr.task");
  if (row) selectTask(row.dataset.job, Number(row.dataset.task));
});

document.addEventListener("keydown", (ev) => {
  const row = ev.target.closest && ev.target.closest("tr.task");
  if (row && (ev.key === "Enter" || ev.key === " ")) {
    ev.preventDefault();
    selectTask(row.dataset.job, Number(row.dataset.task));
  }
});

function selectTask(jobId, i) {
  ui.selected.set(jobId, i);
  redraw();
  refreshDetails(ui.state);
}

document.getElementById("lookup").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const out = document.getElementById("lookup-result");
  const q = new URLSearchParams({ workload: document.getElementById("lookup-workload").value.trim() });
  const dc = document.getElementById("lookup-dc").value.trim();
  if (dc) q.set("device_class", dc);
  out.innerHTML = '<div class="note">looking up…</div>';
  try {
    out.innerHTML = `<div class="record">${recordHtml(await getJson("/api/best?" + q))}</div>`;
  } catch (e) {
    out.innerHTML = `<div class="error">${esc(e.message)}</div>`;
  }
});

// Theme: the system's scheme (followed as it changes) unless the toggle picked one (kept in
// localStorage). The stylesheet knows only data-theme.
const THEMES = ["system", "light", "dark"];
const systemDark = window.matchMedia("(prefers-color-scheme: dark)");
let theme = "system";
function applyTheme() {
  const dark = theme === "dark" || (theme === "system" && systemDark.matches);
  document.documentElement.dataset.theme = dark ? "dark" : "light";
  document.getElementById("theme").textContent = "Theme: " + theme;
}
try { theme = localStorage.getItem("lathe-theme") || "system"; } catch (e) { /* private mode */ }
if (!THEMES.includes(theme)) theme = "system";
applyTheme();
systemDark.addEventListener("change", applyTheme);
document.getElementById("theme").addEventListener("click", () => {
  theme = THEMES[(THEMES.indexOf(theme) + 1) % THEMES.length];
  try { localStorage.setItem("lathe-theme", theme); } catch (e) { /* private mode */ }
  applyTheme();
});

poll();
