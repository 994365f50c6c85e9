/* tandem console — the lockstep, alerts, transfers and plots views (console.js holds the API,
 * sign-in, live data, the fleet view, the audit log and the actions, and loads first: this file
 * takes its helpers and state from window.tandemConsole and registers its renderers there).
 */
"use strict";
(function () {
  const C = window.tandemConsole;
  const { $, esc, when, secs, nowUs, COLS, st, api, schedule, groups, rankAge, auditRows } = C;

  /* ---- lockstep ---------------------------------------------------------------------------- */
  const PATH_COLORS = { idle: "#c9ced4", batch: "#4e7cc7", decode: "#4e7cc7", prefill: "#7a5fc0", extend: "#7a5fc0", mixed: "#2aa39a", overlap: "#2f8f4e" };
  function pathColor(p) {
    if (PATH_COLORS[p]) return PATH_COLORS[p];
    let h = 0; for (const ch of String(p)) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
    return `hsl(${h % 360}, 55%, 55%)`;
  }
  function majority(vals) {
    const m = new Map();
    for (const v of vals) m.set(v, (m.get(v) || 0) + 1);
    let best = null, n = 0;
    for (const [v, c] of m) if (c > n) { best = v; n = c; }
    return { value: best, count: n, distinct: m.size };
  }
  function fillSelect(sel, names) {
    const cur = sel.value;
    const want = names.join("\n");
    if (sel.dataset.names !== want) {
      sel.innerHTML = names.map((n) => `<option>${esc(n)}</option>`).join("");
      sel.dataset.names = want;
      if (names.includes(cur)) sel.value = cur;
    }
  }
  function oddRanks(g) {
    /* the detectors' minority first, then the record comparison over the recent samples */
    const odd = new Map();
    for (const a of g.alerts) {
      const ev = a.evidence || {};
      for (const r of ev.minority_ranks || []) odd.set(r, a.kind + (ev.op ? " (others in " + ev.op + ")" : ""));
    }
    const ranks = g.current ? g.current.ranks : [];
    if (ranks.length < 2) return odd;
    const byIter = new Map(), bySeq = new Map();
    for (const r of ranks) for (const s of r.samples) {
      (byIter.get(s.iter) || byIter.set(s.iter, []).get(s.iter)).push([r.rank, s.path + "/" + s.plan_hash]);
      (bySeq.get(s.coll_seq) || bySeq.set(s.coll_seq, []).get(s.coll_seq)).push([r.rank, s.coll_hash]);
    }
    for (const [what, map] of [["plan", byIter], ["collective", bySeq]]) for (const [, list] of map) {
      const ranksThere = new Set(list.map((x) => x[0]));
      if (ranksThere.size < 2) continue;
      const mj = majority(list.map((x) => x[1]));
      if (mj.distinct < 2) continue;
      for (const [r, v] of list) if (v !== mj.value && !odd.has(r)) odd.set(r, what + " differs");
    }
    return odd;
  }
  function renderLockstep() {
    const gs = groups().filter((g) => g.current);
    const sel = $("ls-group");
    fillSelect(sel, gs.map((g) => g.name));
    const g = gs.find((x) => x.name === sel.value) || gs[0];
    const heat = $("ls-heat");
    const tb = $("ls-ranks").tBodies[0];
    if (!g) { heat.innerHTML = '<p class="muted">no ranks reporting</p>'; tb.innerHTML = ""; return; }
    const ranks = g.current.ranks;
    const odd = oddRanks(g);
    const verdict = $("ls-verdict");
    verdict.textContent = odd.size ? "diverged: rank " + [...odd.keys()].join(", ") : "in lockstep";
    verdict.className = "pill " + (odd.size ? "bad" : "ok");
    /* columns: the newest COLS distinct iterations any rank reported */
    const iters = new Set();
    for (const r of ranks) for (const s of r.samples) iters.add(s.iter);
    const cols = [...iters].sort((a, b) => a - b).slice(-COLS);
    const colIdx = new Map(cols.map((it, i) => [it, i]));
    const paths = new Set();
    /* majority per iteration (plan) and per coll_seq (collective hash) */
    const planAt = new Map(), collAt = new Map();
    for (const r of ranks) for (const s of r.samples) {
      (planAt.get(s.iter) || planAt.set(s.iter, []).get(s.iter)).push(s.path + "/" + s.plan_hash);
      (collAt.get(s.coll_seq) || collAt.set(s.coll_seq, []).get(s.coll_seq)).push(s.coll_hash);
    }
    const planMj = new Map([...planAt].map(([k, v]) => [k, majority(v)]));
    const collMj = new Map([...collAt].map(([k, v]) => [k, majority(v)]));
    const cw = 4, ch = 12;
    if (heat.dataset.sig !== g.current.id + ":" + ranks.length) {
      heat.innerHTML = ranks.map((r) => `<div class="ls-row" data-rank="${r.rank}"><span class="ls-label">rank ${r.rank}</span>` +
        `<canvas width="${COLS * cw}" height="${ch}"></canvas></div>`).join("");
      heat.dataset.sig = g.current.id + ":" + ranks.length;
    }
    const rows = heat.querySelectorAll(".ls-row");
    ranks.forEach((r, i) => {
      const row = rows[i];
      row.classList.toggle("odd", odd.has(r.rank));
      row.dataset.odd = odd.has(r.rank) ? "1" : "0";
      row.title = odd.has(r.rank) ? "rank " + r.rank + ": " + odd.get(r.rank) : "";
      const cx = row.querySelector("canvas").getContext("2d");
      cx.clearRect(0, 0, COLS * cw, ch);
      for (const s of r.samples) {
        const c = colIdx.get(s.iter);
        if (c === undefined) continue;
        paths.add(s.path);
        cx.fillStyle = pathColor(s.path);
        cx.fillRect(c * cw, 2, cw - 1, ch - 4);
        const pm = planMj.get(s.iter), cm = collMj.get(s.coll_seq);
        if ((pm && pm.distinct > 1 && pm.value !== s.path + "/" + s.plan_hash) || (cm && cm.distinct > 1 && cm.value !== s.coll_hash)) {
          cx.fillStyle = "#d62d20";
          cx.fillRect(c * cw, 0, cw - 1, ch);
        }
      }
    });
    $("ls-legend").innerHTML = [...paths].sort().map((p) => `<span><span class="sw" style-color="${esc(p)}"></span>${esc(p)}</span>`).join("") +
      '<span><span class="sw mismatch"></span>hash differs from the other ranks</span>';
    for (const sw of $("ls-legend").querySelectorAll(".sw")) sw.style.background = sw.classList.contains("mismatch") ? "#d62d20" : pathColor(sw.getAttribute("style-color"));
    /* the table: latest sample per rank, cells that differ from the majority marked */
    const lat = ranks.map((r) => r.latest || {});
    const mjOf = (f) => majority(lat.map(f)).value;
    const mPlan = mjOf((s) => s.plan_hash), mColl = mjOf((s) => s.coll_seq + "/" + s.coll_hash), mPath = mjOf((s) => s.path);
    const mOp = mjOf((s) => (s.in_coll ? s.in_coll.op + "#" + s.in_coll.seq : "-"));
    tb.innerHTML = ranks.map((r) => {
      const s = r.latest || {};
      const d = (c) => (c ? ' class="diff"' : "");
      const ic = s.in_coll ? `${esc(s.in_coll.op)} #${esc(s.in_coll.seq)} for ${secs(nowUs() - s.in_coll.since_us)}` : "—";
      const icKey = s.in_coll ? s.in_coll.op + "#" + s.in_coll.seq : "-";
      return `<tr class="${odd.has(r.rank) ? "odd" : ""}" data-rank="${r.rank}" data-iter="${esc(s.iter)}">` +
        `<td>${r.rank}${odd.has(r.rank) ? " ⚠ " + esc(odd.get(r.rank)) : ""}</td><td class="num">${esc(s.iter)}</td>` +
        `<td${d(s.path !== mPath)}>${esc(s.path)}</td><td class="mono"${d(s.plan_hash !== mPlan)}>${esc(s.plan_hash)}</td>` +
        `<td class="num"${d(s.coll_seq + "/" + s.coll_hash !== mColl)}>${esc(s.coll_seq)}</td><td class="mono"${d(s.coll_seq + "/" + s.coll_hash !== mColl)}>${esc(s.coll_hash)}</td>` +
        `<td data-field="in_coll"${d(icKey !== mOp)}>${ic}</td><td class="num">${esc(s.bs)}</td><td class="num">${esc(s.waiting)}</td><td class="num">${esc(s.running)}</td>` +
        `<td class="num">${(rankAge(r) / 1000).toFixed(1)} s</td></tr>`;
    }).join("");
  }
  $("ls-group").addEventListener("change", schedule);

  /* ---- alerts ------------------------------------------------------------------------------ */
  function allAlerts() {
    const m = new Map();
    for (const a of st.alertsDb) m.set(a.id, a);
    for (const a of st.alertsLive || []) m.set(a.id, Object.assign({}, m.get(a.id) || {}, a));
    return [...m.values()].sort((a, b) => (a.state === b.state ? b.opened_us - a.opened_us : a.state === "open" ? -1 : 1));
  }
  function renderAlerts() {
    const list = allAlerts();
    $("alerts").tBodies[0].innerHTML = list.map((a) =>
      `<tr class="clickable ${a.state === "open" ? "bad" : ""} ${st.selectedAlert === a.id ? "selected" : ""}" data-alert="${esc(a.id)}" data-kind="${esc(a.kind)}" data-state="${esc(a.state)}">` +
      `<td>${esc(a.id)}</td><td>${esc(a.kind)}</td><td>${esc(a.group)}</td><td>${esc(a.state)}</td><td>${esc(when(a.opened_us))}</td>` +
      `<td>${esc(a.summary)}</td><td>${a.resolved_us ? esc(when(a.resolved_us)) + " by " + esc(a.resolved_by) : ""}</td></tr>`).join("") ||
      '<tr><td colspan="7" class="muted">no alerts</td></tr>';
    if (st.selectedAlert === null && list.length && list[0].state === "open") st.selectedAlert = list[0].id;
    const a = list.find((x) => x.id === st.selectedAlert);
    $("alert-detail").innerHTML = a ? alertDetail(a) : "";
  }
  $("alerts").addEventListener("click", (e) => {
    const tr = e.target.closest("tr[data-alert]");
    if (tr) { st.selectedAlert = Number(tr.dataset.alert); schedule(); }
  });
  function runbookFor(kind) {
    if (st.runbook === null) {
      st.runbook = "";
      fetch("/console/alerts.md", { cache: "default" }).then((r) => r.text()).then((t) => { st.runbook = t; schedule(); }).catch(() => {});
      return "";
    }
    const i = st.runbook.indexOf("### " + kind + "\n");
    if (i < 0) return "";
    const j = st.runbook.indexOf("\n### ", i + 4);
    return st.runbook.slice(i, j < 0 ? undefined : j);
  }
  function ranksTable(rows, minority) {
    if (!Array.isArray(rows) || !rows.length) return "";
    const mj = (f) => majority(rows.map(f)).value;
    const mPath = mj((r) => r.path), mPlan = mj((r) => r.plan_hash), mColl = mj((r) => r.coll_seq + "/" + r.coll_hash);
    const mOp = mj((r) => (r.in_coll ? r.in_coll.op : "-"));
    const d = (c) => (c ? ' class="diff"' : "");
    return `<table class="ev-ranks"><thead><tr><th>rank</th><th>iter</th><th>path</th><th>plan hash</th><th>coll_seq</th><th>coll hash</th><th>in collective</th><th>bs</th><th>waiting</th><th>running</th><th>sample age</th></tr></thead><tbody>` +
      rows.map((r) => {
        const ic = r.in_coll ? `${esc(r.in_coll.op)} #${esc(r.in_coll.seq)}` + (r.in_coll.for_us !== undefined ? " for " + secs(r.in_coll.for_us) : "") : "—";
        return `<tr class="${minority.includes(r.rank) ? "odd" : ""}" data-rank="${esc(r.rank)}"><td>${esc(r.rank)}${minority.includes(r.rank) ? " (minority)" : ""}</td><td class="num">${esc(r.iter)}</td>` +
          `<td${d(r.path !== mPath)}>${esc(r.path)}</td><td class="mono"${d(r.plan_hash !== mPlan)}>${esc(r.plan_hash)}</td>` +
          `<td class="num"${d(r.coll_seq + "/" + r.coll_hash !== mColl)}>${esc(r.coll_seq)}</td><td class="mono"${d(r.coll_seq + "/" + r.coll_hash !== mColl)}>${esc(r.coll_hash)}</td>` +
          `<td data-field="op"${d((r.in_coll ? r.in_coll.op : "-") !== mOp)}>${ic}</td><td class="num">${esc(r.bs)}</td><td class="num">${esc(r.waiting)}</td>` +
          `<td class="num">${esc(r.running)}</td><td class="num">${r.sample_age_us !== undefined ? secs(r.sample_age_us) : ""}</td></tr>`;
      }).join("") + `</tbody></table>`;
  }
  function kvTable(o) {
    return `<table><tbody>` + Object.keys(o || {}).map((k) => `<tr><th>${esc(k)}</th><td class="mono">${esc(typeof o[k] === "object" ? JSON.stringify(o[k]) : o[k])}</td></tr>`).join("") + `</tbody></table>`;
  }
  function listTable(rows, cols) {
    if (!Array.isArray(rows) || !rows.length) return '<p class="muted">none listed</p>';
    return `<table><thead><tr>${cols.map((c) => `<th>${esc(c[1])}</th>`).join("")}</tr></thead><tbody>` +
      rows.map((r) => `<tr>${cols.map((c) => `<td class="mono">${esc(c[2] ? c[2](r[c[0]], r) : typeof r[c[0]] === "object" ? JSON.stringify(r[c[0]]) : r[c[0]])}</td>`).join("")}</tr>`).join("") + `</tbody></table>`;
  }
  function flatten(o, pre, out) {
    for (const k of Object.keys(o || {})) {
      const v = o[k];
      if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, pre + k + ".", out);
      else out.set(pre + k, Array.isArray(v) ? JSON.stringify(v) : String(v));
    }
    return out;
  }
  function evidenceHtml(a) {
    const ev = a.evidence || {};
    const ageS = (v) => (v === undefined ? "" : secs(v));
    switch (a.kind) {
    case "RANK_DIVERGENCE": {
      const mr = ev.minority_ranks || [];
      const lead = ev.form === "position"
        ? `rank(s) <b data-field="minority">${esc(mr.join(", "))}</b> ran <b>${esc(ev.minority_op || "?")}</b> while the others wait in <b data-field="op">${esc(ev.op)}</b> at coll_seq ${esc(ev.seq)}`
        : `rank(s) <b data-field="minority">${esc(mr.join(", "))}</b> diverged: ${esc(ev.what)}` + (ev.op ? ` (op <b data-field="op">${esc(ev.op)}</b>)` : "");
      return `<p>${lead} <span class="muted">(form: ${esc(ev.form)}, instance ${esc(ev.instance_id)})</span></p>` +
        listTable(ev.minority, [["rank", "minority rank"], ["op", "op"], ["seq", "seq"], ["path", "path"]]) + ranksTable(ev.ranks, mr);
    }
    case "WEDGE":
      return `<p>no progress for <b>${ageS(ev.stalled_us)}</b> at iteration ${esc(ev.min_iter)} with ${esc(ev.pending)} request(s) pending <span class="muted">(instance ${esc(ev.instance_id)})</span></p>` +
        ranksTable(ev.ranks, (ev.ranks || []).filter((r) => r.iter === ev.min_iter && (ev.ranks || []).some((o) => o.iter !== r.iter)).map((r) => r.rank));
    case "LAYOUT_MISMATCH": {
      const h = flatten(ev.host, "", new Map()), d = flatten(ev.device, "", new Map());
      const keys = [...new Set([...h.keys(), ...d.keys()])];
      return `<p>first difference: <b>${esc(ev.why)}</b> <span class="muted">(instance ${esc(ev.instance_id)}, rank ${esc(ev.rank)})</span></p>` +
        `<table class="side-by-side"><thead><tr><th>field</th><th>host record</th><th>device record</th></tr></thead><tbody>` +
        keys.map((k) => `<tr class="${h.get(k) !== d.get(k) ? "odd" : ""}"><td class="mono">${esc(k)}</td><td class="mono">${esc(h.get(k))}</td><td class="mono">${esc(d.get(k))}</td></tr>`).join("") + `</tbody></table>`;
    }
    case "CORRUPTION":
      return `<p>${esc(ev.count)} corruption event(s) in the last 30 s${ev.host_tier ? " on the <b>host-tier</b> path" : ""}</p>` +
        listTable(ev.events, [["type", "type"], ["instance_id", "instance"], ["rank", "rank"], ["room", "room"], ["reason", "reason"],
          ["data", "pages", (v) => (v && (v.pages || v.page)) !== undefined ? JSON.stringify(v.pages || v.page) : ""],
          ["data", "layer", (v) => (v && v.layer !== undefined ? v.layer : "")], ["data", "data"]]);
    case "TRANSFER_STALL":
      return `<p>${esc(ev.stuck_rooms)} room(s) stuck; last completion ${ageS(ev.last_completion_age_us)} ago</p>` +
        `<h4>rooms</h4>` + listTable(ev.rooms, [["room", "room"], ["state", "state"], ["age_us", "age", ageS], ["instance_id", "instance"], ["rank", "rank"]]) +
        `<h4>thread heartbeats</h4>` + listTable(ev.heartbeats, [["instance_id", "instance"], ["rank", "rank"], ["thread", "thread"], ["age_us", "heartbeat age", ageS]]);
    case "ABORT_UNACKED":
      return `<p>${esc(ev.unacked)} abort(s) without ACK (decode pages quarantined)</p>` +
        listTable(ev.aborts, [["room", "room"], ["peer", "peer"], ["instance_id", "instance"], ["rank", "rank"], ["age_us", "age", ageS]]);
    default:
      return kvTable(ev);
    }
  }
  function alertDetail(a) {
    const taken = st.actions.filter((x) => (x.params && String(x.params.alert_id) === String(a.id)) ||
      (a.resolved_by && a.resolved_by === "action:" + x.id));
    const rb = runbookFor(a.kind);
    return `<div class="evidence" data-alert="${esc(a.id)}"><h3>${esc(a.kind)} on ${esc(a.group)} — ${esc(a.state)}` +
      ` <a href="/console/alerts.md" target="_blank" rel="noopener">runbook: docs/alerts.md § ${esc(a.kind)}</a></h3>` +
      `<p>${esc(a.summary)}</p><p class="muted">opened ${esc(when(a.opened_us))}` +
      (a.resolved_us ? `, resolved ${esc(when(a.resolved_us))} by ${esc(a.resolved_by)}` : "") +
      (a.policy ? ` · policy ${esc(a.policy)}` : "") + (a.remedy ? ` · remedy ${esc(a.remedy.action)} ${esc(JSON.stringify(a.remedy.params || {}))}` : "") + `</p>` +
      `<h4>evidence</h4>${evidenceHtml(a)}` +
      `<h4>actions taken</h4>` + (taken.length ? auditRows(taken, true) : '<p class="muted">none recorded for this alert</p>') +
      (rb ? `<details open><summary>runbook</summary><pre class="runbook">${esc(rb)}</pre></details>` : "") + `</div>`;
  }

  /* ---- transfers --------------------------------------------------------------------------- */
  const TERMINAL = new Set(["SUCCESS", "FAILED", "ABORTED"]);
  function renderTransfers() {
    const t = st.transfers;
    const byGroup = new Map();
    for (const x of t) {
      const g = byGroup.get(x.group) || new Map();
      g.set(x.state, (g.get(x.state) || 0) + 1);
      byGroup.set(x.group, g);
    }
    const states = [...new Set(t.map((x) => x.state))].sort();
    $("xfer-summary").innerHTML = t.length ? `<table id="xfer-counts"><thead><tr><th>group (pair side)</th>${states.map((s) => `<th class="num">${esc(s)}</th>`).join("")}</tr></thead><tbody>` +
      [...byGroup].map(([g, m]) => `<tr><td>${esc(g)}</td>${states.map((s) => `<td class="num">${m.get(s) || 0}</td>`).join("")}</tr>`).join("") + `</tbody></table>` :
      '<p class="muted">no transfer events in the last hour</p>';
    const now = nowUs();
    const open = t.filter((x) => !TERMINAL.has(x.state)).sort((a, b) => a.first_us - b.first_us).slice(0, 20);
    $("xfer-oldest").tBodies[0].innerHTML = open.map((x) => `<tr class="clickable" data-room="${esc(x.room)}"><td class="mono">${esc(x.room)}</td><td>${esc(x.group)}</td>` +
      `<td>${esc(x.state)}</td><td class="num">${secs(now - x.first_us)}</td><td class="num">${esc(x.events)}</td></tr>`).join("") ||
      '<tr><td colspan="5" class="muted">none: every room reached a terminal state</td></tr>';
  }
  async function showRoom(room) {
    st.selectedRoom = room;
    $("xfer-room").textContent = "room " + room;
    const tb = $("xfer-timeline").tBodies[0];
    try {
      const j = await api("GET", "/api/v1/transfers/" + encodeURIComponent(room));
      tb.innerHTML = (j.events || []).map((e) => `<tr><td>${esc(when(e.ts_us))}.${String(Math.floor(e.ts_us / 1000) % 1000).padStart(3, "0")}</td><td>${esc(e.group)}</td>` +
        `<td class="mono">${esc(e.instance_id)}</td><td>${esc(e.rank)}</td><td>${esc(e.from_state)}</td><td>${esc(e.to_state)}</td>` +
        `<td class="mono">${esc(e.reason || "")}${e.data ? " " + esc(JSON.stringify(e.data)) : ""}</td></tr>`).join("") || '<tr><td colspan="7" class="muted">no events</td></tr>';
    } catch (e) { tb.innerHTML = `<tr><td colspan="7" class="error">${esc(e.message)}</td></tr>`; }
  }
  $("view-transfers").addEventListener("click", (e) => {
    const tr = e.target.closest("tr[data-room]");
    if (tr) showRoom(tr.dataset.room);
  });

  /* ---- plots ------------------------------------------------------------------------------- */
  let plots = [];
  function renderPlotControls() {
    fillSelect($("plot-group"), groups().filter((g) => g.current).map((g) => g.name));
  }
  $("plot-group").addEventListener("change", () => loadPlots());
  $("plot-window").addEventListener("change", () => loadPlots());
  /* One request at a time; while the view is shown the plots are redrawn every 5 s, the newest
   * rows coming from the stream's samples of rank 0 (which carry the same statistics). */
  let plotBusy = false;
  setInterval(() => { if (st.view === "plots" && st.token && !plotBusy) loadPlots(); }, 5000);
  async function loadPlots() {
    renderPlotControls();
    const g = groups().find((x) => x.name === $("plot-group").value && x.current);
    const box = $("plots");
    if (!g || typeof uPlot === "undefined") {
      for (const p of plots) p.destroy();
      plots = [];
      box.innerHTML = '<p class="muted">' + (g ? "uPlot not loaded" : "no group reporting") + "</p>";
      return;
    }
    const win = Number($("plot-window").value);
    const now = nowUs(), since = now - win * 1e6;
    const r0 = g.current.ranks[0];
    /* up to 5 min every persisted row (5 per second); longer windows one row per step, 2000 in all */
    const step = win > 300 ? Math.ceil((win * 1e6) / 2000) : 0;
    let rows = [], xf = [];
    plotBusy = true;
    try {
      const [h, t] = await Promise.all([
        api("GET", `/api/v1/ranks/${encodeURIComponent(r0.instance_id)}/${r0.rank}/history?since_us=${Math.floor(since)}&limit=10000` + (step ? `&step_us=${step}` : "")),
        api("GET", `/api/v1/transfers?window_s=${win}`)]);
      rows = h.samples || []; xf = t.transfers || [];
    } catch (e) { box.innerHTML = `<p class="error">${esc(e.message)}</p>`; return; }
    finally { plotBusy = false; }
    /* the ring's newer samples (from the stream) after the last persisted one */
    const lastTs = rows.length ? rows[rows.length - 1].ts_us : since;
    const live = (r0.samples || []).filter((x) => x.ts_us > lastTs && x.ts_us >= since);
    const nHist = rows.length;
    rows = rows.concat(step ? live.filter((x, i, a) => i === a.length - 1 || Math.floor(x.ts_us / step) !== Math.floor(a[i + 1].ts_us / step)) : live);
    $("plot-note").textContent = `${g.name} rank 0 (instance ${r0.instance_id}): ${nHist} rows from PostgreSQL` +
      (step ? ` (one per ${(step / 1e6).toFixed(1)} s, the newest of each; latencies and KV use the largest in each step)` : "") +
      `, ${rows.length - nHist} newer from the live stream`;
    const ms = (v) => (v ? v / 1000 : null); /* 0: nothing observed in that interval */
    const S = { ts: [], tps: [], rps: [], t50: [], t99: [], i50: [], i99: [], wait: [], run: [], bs: [], kvu: [], kvt: [], hu: [], ht: [], corr: [], lag: [] };
    for (let i = 1; i < rows.length; i++) {
      const a = rows[i - 1], b = rows[i];
      const dt = (b.ts_us - a.ts_us) / 1e6;
      if (dt <= 0) continue;
      const d = (k) => (b[k] >= a[k] ? (b[k] - a[k]) / dt : null); /* a counter going back: a restart */
      S.ts.push(b.ts_us / 1e6);
      S.tps.push(d("tokens_out")); S.rps.push(d("requests_done"));
      S.t50.push(ms(b.ttft_p50_us)); S.t99.push(ms(b.ttft_p99_us));
      S.i50.push(ms(b.itl_p50_us)); S.i99.push(ms(b.itl_p99_us));
      S.wait.push(b.waiting); S.run.push(b.running); S.bs.push(b.bs);
      S.kvu.push(b.kv_pages_used); S.kvt.push(b.kv_pages_total);
      S.hu.push(b.host_pages_used); S.ht.push(b.host_pages_total);
      S.corr.push(b.corruption_total);
      S.lag.push(b.recv_us ? (b.recv_us - b.ts_us) / 1000 : null);
    }
    /* transfers: rooms started per bucket, by their state now */
    const bucket = Math.max(10, Math.round(win / 120));
    const states = [...new Set(xf.map((x) => x.state))].sort();
    const bk = new Map();
    for (const x of xf) {
      const k = Math.floor(x.first_us / 1e6 / bucket) * bucket;
      const m = bk.get(k) || {}; m[x.state] = (m[x.state] || 0) + 1; bk.set(k, m);
    }
    const bx = [...bk.keys()].sort((a, b) => a - b);
    const specs = [
      ["plot-tps", "throughput (tokens/s and requests/s, from rank 0's counters)", S.ts, [["tok/s", S.tps], ["req/s", S.rps]]],
      ["plot-ttft", "time to first token (ms; p50 and p99 per reporting interval)", S.ts, [["TTFT p50", S.t50], ["TTFT p99", S.t99]]],
      ["plot-itl", "inter-token latency (ms; p50 and p99 per reporting interval)", S.ts, [["ITL p50", S.i50], ["ITL p99", S.i99]]],
      ["plot-queue", "queue and batch (rank 0)", S.ts, [["waiting", S.wait], ["running", S.run], ["batch size", S.bs]]],
      ["plot-kv", "KV pages: device pool and HiCache host tier (0 without one)", S.ts, [["device used", S.kvu], ["device total", S.kvt], ["host used", S.hu], ["host total", S.ht]]],
      ["plot-xfer", `transfer rooms started per ${bucket} s, by current state` + (xf.length ? "" : " (none in the window)"), bx, states.map((st) => [st, bx.map((k) => bk.get(k)[st] || 0)])],
      ["plot-corruption", "corruption counter (KV checksum and aux mismatches, rooms at corruption risk; ever)", S.ts, [["corruption", S.corr]]],
      ["plot-lag", "ingest lag (ms: tandemd's receipt − sample time)", S.ts, [["lag", S.lag]]],
    ];
    for (const p of plots) p.destroy();
    plots = [];
    box.innerHTML = specs.map((x) => `<div class="plot" id="${x[0]}"></div>`).join("");
    const w = Math.min(1100, box.clientWidth || 900);
    for (const [id, title, x, series] of specs) {
      const el = $(id);
      /* for tests and scripts: the points drawn and each series' largest value */
      const max = {};
      for (const [label, ys] of series) max[label] = ys.reduce((m, v) => (v !== null && v > m ? v : m), 0);
      el.dataset.points = String(x.length);
      el.dataset.max = JSON.stringify(max);
      plots.push(new uPlot({ title, width: w, height: 180, series: [{}].concat(series.map((s, i) => ({ label: s[0], stroke: ["#4e7cc7", "#d6772b", "#2f8f4e", "#a3261b", "#7a5fc0"][i % 5], spanGaps: false }))) },
        [x].concat(series.map((s) => s[1])), el));
    }
  }

  Object.assign(C.views, {
    lockstep: renderLockstep, transfers: renderTransfers, alerts: renderAlerts,
    plots: renderPlotControls, loadPlots,
  });
})();
