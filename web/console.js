/* tandem console — everything through tandemd's public REST API (README "REST API").
 *
 * Sign-in: a bearer token typed into the form, kept in sessionStorage (never in a URL); a 401 from
 * any call brings the blocking sign-in screen back. The role is what the API says: GET
 * /api/v1/tokens answers an admin token only.
 * Live data: GET /api/v1/stream (server-sent events read through fetch, so the token stays in a
 * header): the ring's recent samples per rank first, then new samples, live alerts and group status
 * as they change. When the stream cannot be had the page polls /api/v1/ranks, /api/v1/status and
 * /api/v1/alerts?source=live every second and retries the stream every 10 s.
 * Rendering: only the view on screen, at most once per animation frame.
 * This file: the API, sign-in, live data, the fleet view, the audit log and the actions;
 * console-views.js: the lockstep, alerts, transfers and plots views.
 */
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s === undefined || s === null ? "" : s)
    .replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const when = (us) => (us ? new Date(us / 1000).toLocaleTimeString() : "");
  const secs = (us) => (us / 1e6).toFixed(1) + " s";
  const nowUs = () => Date.now() * 1000;
  const KEEP = 240;          /* samples kept per rank for the heatmap (the view shows 200) */
  const COLS = 200;

  const st = {
    token: sessionStorage.getItem("tandem-token") || "",
    role: sessionStorage.getItem("tandem-role") || "",
    view: (location.hash || "#fleet").slice(1),
    status: null, groupsDb: [], alertsLive: null, alertsDb: [], actions: [], configs: [],
    transfers: [], health: null, ranks: new Map(), mode: "", streamAbort: null,
    selectedAlert: null, selectedRoom: null, runbook: null, timers: [], actionBusy: false,
  };

  /* ---- API --------------------------------------------------------------------------------- */
  class ApiError extends Error {
    constructor(status, msg) { super(msg); this.status = status; }
  }
  async function api(method, path, body) {
    const r = await fetch(path, {
      method, cache: "no-store",
      headers: Object.assign({ Authorization: "Bearer " + st.token },
        body ? { "Content-Type": "application/json" } : {}),
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    let j = null;
    try { j = JSON.parse(text); } catch (e) { j = { raw: text }; }
    if (r.status === 401 && method === "GET") { showLogin("the token was refused (401): sign in again"); }
    if (!r.ok) {
      const m = (j && j.error && j.error.message) || (j && j.detail) || text.slice(0, 200);
      throw new ApiError(r.status, r.status + " " + r.statusText + (m ? ": " + m : ""));
    }
    return j;
  }

  /* ---- sign-in ----------------------------------------------------------------------------- */
  function showLogin(msg) {
    stopAll();
    st.token = ""; st.role = "";
    sessionStorage.removeItem("tandem-token");
    sessionStorage.removeItem("tandem-role");
    $("login").hidden = false;
    $("login-error").textContent = msg || "";
    $("login-token").value = "";
    $("login-token").focus();
    document.body.dataset.auth = "none";
  }
  async function signIn(token) {
    st.token = token;
    try {
      await api("GET", "/api/v1/status");
    } catch (e) {
      st.token = "";
      $("login-error").textContent = e.status === 401 ? "token refused by tandemd (401)" : "tandemd: " + e.message;
      return false;
    }
    let role = "read";
    try { await api("GET", "/api/v1/tokens"); role = "admin"; } catch (e) { if (e.status !== 403) throw e; }
    st.role = role;
    sessionStorage.setItem("tandem-token", token);
    sessionStorage.setItem("tandem-role", role);
    $("login").hidden = true;
    $("login-error").textContent = "";
    start();
    return true;
  }
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const t = $("login-token").value.trim();
    if (t) signIn(t).catch((err) => { $("login-error").textContent = err.message; });
  });
  $("logout").addEventListener("click", () => showLogin("signed out"));

  /* ---- data -------------------------------------------------------------------------------- */
  function rankKey(inst, rank) { return inst + "/" + rank; }
  function addSamples(info, samples) {
    const k = rankKey(info.instance_id, info.rank);
    let r = st.ranks.get(k);
    if (!r) { r = { samples: [] }; st.ranks.set(k, r); }
    Object.assign(r, { instance_id: info.instance_id, rank: info.rank, group: info.group, role: info.role,
      worker: info.worker, age_ms: info.age_ms, seen: performance.now() });
    const arr = r.samples;
    for (const s of samples || []) {
      if (!s) continue;
      if (arr.length && s.ts_us <= arr[arr.length - 1].ts_us) continue;
      arr.push(s);
    }
    if (arr.length > KEEP) arr.splice(0, arr.length - KEEP);
    r.latest = arr.length ? arr[arr.length - 1] : null;
  }
  function onRanks(list) { for (const x of list) addSamples(x, x.samples || [x.latest]); schedule(); }
  function rankAge(r) { return r.age_ms + (performance.now() - r.seen); }

  /* Groups: supervised (status), registered (/api/v1/groups) and any seen only in telemetry. */
  function groups() {
    const m = new Map();
    for (const g of (st.status && st.status.groups) || []) m.set(g.name, Object.assign({ supervised: true }, g));
    for (const g of st.groupsDb || []) {
      const name = g.name || g.group;
      if (name && !m.has(name)) m.set(name, Object.assign({ name }, g));
    }
    for (const r of st.ranks.values()) if (!m.has(r.group)) m.set(r.group, { name: r.group, mode: r.role });
    const out = [];
    for (const g of m.values()) {
      const ranks = [...st.ranks.values()].filter((r) => r.group === g.name);
      const insts = new Map();
      for (const r of ranks) {
        const i = insts.get(r.instance_id) || { id: r.instance_id, ranks: [], age: Infinity };
        i.ranks.push(r); i.age = Math.min(i.age, rankAge(r)); insts.set(r.instance_id, i);
      }
      const sorted = [...insts.values()].sort((a, b) => a.age - b.age);
      g.current = sorted[0] || null;
      g.dead = sorted.slice(1);
      if (g.current) g.current.ranks.sort((a, b) => a.rank - b.rank);
      g.alerts = (st.alertsLive || []).filter((a) => a.group === g.name && a.state === "open");
      out.push(g);
    }
    return out.sort((a, b) => a.name.localeCompare(b.name));
  }

  /* A rank's verdict now: the detectors first, then its own sample. */
  function rankVerdict(g, r) {
    const why = [];
    for (const a of g.alerts) {
      const ev = a.evidence || {};
      if (ev.instance_id && ev.instance_id !== r.instance_id) continue;
      if (Array.isArray(ev.minority_ranks) && ev.minority_ranks.includes(r.rank)) why.push(a.kind);
      else if (ev.rank === r.rank) why.push(a.kind);
      else if (a.kind === "WEDGE" && r.latest && ev.min_iter === r.latest.iter) why.push("WEDGE");
      else if (a.kind === "WORKER_LOST" || a.kind === "TRANSFER_STALL" && (ev.heartbeats || []).some((h) => h.rank === r.rank)) why.push(a.kind);
    }
    const s = r.latest;
    const age = rankAge(r);
    if (age > 2000) why.push("silent " + (age / 1000).toFixed(1) + " s");
    if (s && s.in_coll) {
      const f = nowUs() - s.in_coll.since_us;
      if (f > 1e6 && age < 2000) why.push("in " + s.in_coll.op + " #" + s.in_coll.seq + " for " + secs(f));
    }
    const bad = why.length > 0;
    const warn = !bad && s && s.in_coll && nowUs() - s.in_coll.since_us > 2e5;
    return { cls: bad ? "bad" : warn ? "warn" : "ok", why };
  }

  /* ---- live: the stream, or polling -------------------------------------------------------- */
  function stopAll() {
    if (st.streamAbort) { st.streamAbort.abort(); st.streamAbort = null; }
    for (const t of st.timers) clearInterval(t);
    st.timers = [];
  }
  function setMode(m) {
    st.mode = m;
    $("live").textContent = m === "stream" ? "live: stream" : m === "poll" ? "live: polling (no stream)" : m;
    $("live").className = "pill " + (m === "stream" ? "ok" : "warn");
  }
  async function stream() {
    const ctl = new AbortController();
    st.streamAbort = ctl;
    let r;
    try {
      r = await fetch("/api/v1/stream", { headers: { Authorization: "Bearer " + st.token }, signal: ctl.signal, cache: "no-store" });
    } catch (e) { return false; }
    if (r.status === 401) { showLogin("the token was refused (401): sign in again"); return true; }
    if (!r.ok || !r.body) return false;
    setMode("stream");
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const chunk = buf.slice(0, i); buf = buf.slice(i + 2);
          let ev = "message", data = "";
          for (const line of chunk.split("\n")) {
            if (line.startsWith("event:")) ev = line.slice(6).trim();
            else if (line.startsWith("data:")) data += line.slice(5).trim();
          }
          if (data) onStreamEvent(ev, JSON.parse(data));
        }
      }
    } catch (e) { /* aborted or cut: fall back */ }
    return ctl.signal.aborted;
  }
  function onStreamEvent(ev, d) {
    if (ev === "ranks") onRanks(d.ranks || []);
    else if (ev === "alerts") { st.alertsLive = d.alerts || []; schedule(); }
    else if (ev === "status") { st.status = d; schedule(); }
    else if (ev === "health") { st.health = d; schedule(); }
  }
  async function pollLive() {
    const [ranks, status, alerts, health] = await Promise.allSettled([
      api("GET", "/api/v1/ranks"), api("GET", "/api/v1/status"), api("GET", "/api/v1/alerts?source=live"),
      fetch("/health", { cache: "no-store" }).then((r) => r.json())]);
    if (ranks.status === "fulfilled") onRanks(ranks.value.ranks || []);
    if (status.status === "fulfilled") st.status = status.value;
    if (alerts.status === "fulfilled") st.alertsLive = alerts.value.alerts || [];
    else st.alertsLive = null;
    st.health = health.status === "fulfilled" ? health.value : null;
    schedule();
  }
  async function liveLoop() {
    for (;;) {
      if (!st.token) return;
      const stopped = await stream();
      if (stopped || !st.token) return;
      setMode("poll");
      const t = setInterval(() => pollLive().catch(() => {}), 1000);
      await pollLive().catch(() => {});
      await new Promise((res) => setTimeout(res, 10000));
      clearInterval(t);
    }
  }
  /* Database-backed state: every 2 s (the alert list, the audit log, configs, transfers). */
  async function pollSlow() {
    const get = (p) => api("GET", p);
    const [gdb, adb, act, cfg, xf] = await Promise.allSettled([
      get("/api/v1/groups"), get("/api/v1/alerts?limit=100"), get("/api/v1/actions?limit=100"),
      get("/api/v1/config"), st.view === "transfers" ? get("/api/v1/transfers?window_s=3600") : Promise.resolve(null)]);
    const errs = [];
    if (gdb.status === "fulfilled") st.groupsDb = gdb.value.groups || []; else errs.push(gdb.reason.message);
    if (adb.status === "fulfilled") st.alertsDb = adb.value.alerts || []; else errs.push(adb.reason.message);
    if (act.status === "fulfilled") st.actions = act.value.actions || []; else errs.push(act.reason.message);
    if (cfg.status === "fulfilled") st.configs = cfg.value.configs || []; else errs.push(cfg.reason.message);
    if (xf.status === "fulfilled" && xf.value) st.transfers = xf.value.transfers || [];
    $("banner").hidden = !errs.length;
    $("banner").textContent = errs.length ? "database-backed views are stale: " + errs[0] : "";
    schedule();
  }
  function start() {
    document.body.dataset.auth = st.role;
    $("who").textContent = "signed in: " + st.role + " token";
    setMode("connecting");
    pollLive().then(() => {
      document.body.dataset.readyMs = String(Math.round(performance.now()));
      document.body.dataset.ready = "1";
    }).catch(() => {});
    pollSlow().catch(() => {});
    st.timers.push(setInterval(() => pollSlow().catch(() => {}), 2000));
    st.timers.push(setInterval(schedule, 1000));
    liveLoop();
    showView(st.view);
  }

  /* ---- rendering --------------------------------------------------------------------------- */
  let pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; render(); });
  }
  function render() {
    if (!st.token) return;
    renderHeader();
    const v = st.view;
    if (v === "fleet") renderFleet();
    else if (v === "audit") renderAudit();
    else if (views[v]) views[v]();
    disableForRole();
  }
  function showView(v) {
    if (!$("view-" + v)) v = "fleet";
    st.view = v;
    if (location.hash !== "#" + v) history.replaceState(null, "", "#" + v);
    for (const s of document.querySelectorAll("section.view")) s.hidden = s.id !== "view-" + v;
    for (const b of document.querySelectorAll("#nav button")) b.classList.toggle("active", b.dataset.view === v);
    if (v === "transfers") pollSlow().catch(() => {});
    if (v === "plots") views.loadPlots();
    schedule();
  }
  $("nav").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-view]");
    if (b) showView(b.dataset.view);
  });
  window.addEventListener("hashchange", () => showView(location.hash.slice(1)));

  function renderHeader() {
    const h = st.health;
    const cp = $("cp-status");
    if (!h) { cp.textContent = "tandemd unreachable"; cp.className = "pill bad"; }
    else { cp.textContent = "tandemd " + h.status + " · db " + h.db; cp.className = "pill " + (h.status === "ok" && h.db === "up" ? "ok" : "warn"); }
    const ac = $("alert-count");
    if (st.alertsLive === null) { ac.textContent = "?"; ac.className = "pill warn"; }
    else {
      const n = st.alertsLive.filter((a) => a.state === "open").length;
      ac.textContent = n + " open"; ac.className = "pill " + (n ? "bad" : "ok");
    }
  }

  function cfgOf(g) {
    const c = Object.assign({}, g.config || {});
    const v = st.configs.filter((x) => x.group === g.name).pop();
    if (v && v.config) for (const k in v.config) if (!(k in c)) c[k] = v.config[k];
    return c;
  }
  function tokPerS(g) {
    const r0 = g.current && g.current.ranks[0];
    if (!r0 || r0.samples.length < 2) return null;
    const a = r0.samples.filter((s) => s.ts_us >= r0.latest.ts_us - 3e6);
    if (a.length < 2) return 0;
    let toks = 0;
    for (let i = 1; i < a.length; i++) toks += (a[i].iter - a[i - 1].iter) * (a[i].path === "idle" ? 0 : a[i].bs);
    return toks / ((a[a.length - 1].ts_us - a[0].ts_us) / 1e6);
  }
  function groupVerdict(g) {
    const reasons = [];
    for (const a of g.alerts) reasons.push(a.kind + ": " + (a.summary || ""));
    if (g.current) for (const r of g.current.ranks) {
      const v = rankVerdict(g, r);
      for (const w of v.why) if (!/^[A-Z_]+$/.test(w)) reasons.push("rank " + r.rank + " " + w);
    } else reasons.push("no rank reports");
    return reasons;
  }
  function stateText(g) {
    if (!g.supervised) return { text: g.state || "registered", cls: "off" };
    const s = g.state || "?";
    return { text: s, cls: s === "running" && g.ready ? "ok" : s === "drained" || s === "draining" ? "warn" : "bad" };
  }
  function groupCard(g) {
    const reasons = groupVerdict(g);
    const c = cfgOf(g);
    const sv = stateText(g);
    const healthy = reasons.length === 0;
    const cur = g.current;
    const r0 = cur && cur.ranks[0] && cur.ranks[0].latest;
    const tps = tokPerS(g);
    const dflt = (k, d) => (k in c ? esc(c[k]) : esc(d) + ' <span class="muted">(default)</span>');
    const chips = cur ? cur.ranks.map((r) => {
      const v = rankVerdict(g, r);
      const s = r.latest || {};
      return `<span class="rank ${v.cls}" data-group="${esc(g.name)}" data-rank="${r.rank}" data-verdict="${v.cls}" title="${esc(v.why.join("; "))}">` +
        `r${r.rank} · iter ${esc(s.iter)} · ${esc(s.path)}` + (v.why.length ? " · " + esc(v.why.join("; ")) : "") + `</span>`;
    }).join("") : '<span class="muted">no ranks reporting</span>';
    const dead = g.dead.length ? `<details><summary>${g.dead.length} earlier incarnation(s), no longer reporting</summary>` +
      g.dead.map((i) => `<div class="mono">${esc(i.id)}: ${i.ranks.length} rank(s), last sample ${(i.age / 1000).toFixed(0)} s ago</div>`).join("") + `</details>` : "";
    const overlapOn = c.overlap !== "off";
    const hicacheOn = c.hicache === "on";
    const busy = g.supervised ? "" : " disabled";
    const acts = `<div class="actions">` +
      `<button data-act="drain" data-group="${esc(g.name)}"${busy}>drain</button>` +
      `<button data-act="resume" data-group="${esc(g.name)}"${busy}>resume</button>` +
      `<button data-act="restart" data-group="${esc(g.name)}"${busy}>restart</button>` +
      `<button data-act="reconfigure" data-key="overlap" data-value="${overlapOn ? "off" : "on"}" data-group="${esc(g.name)}"${busy}>overlap ${overlapOn ? "off" : "on"}</button>` +
      `<button data-act="reconfigure" data-key="hicache" data-value="${hicacheOn ? "off" : "on"}" data-group="${esc(g.name)}"${busy}>HiCache ${hicacheOn ? "off" : "on"}</button>` +
      `<select data-kv="${esc(g.name)}"${busy}><option value="">KV dtype…</option><option>auto</option><option>bf16</option><option>fp8_e4m3</option></select>` +
      `</div>`;
    return `<div class="group ${healthy ? "" : "bad"}" data-group="${esc(g.name)}">` +
      `<h3>${esc(g.name)} <span class="pill">${esc(g.mode || "colocated")}</span>` +
      `<span class="pill ${sv.cls}" data-field="state">${esc(sv.text)}</span>` +
      `<span class="pill ${g.ready ? "ok" : "bad"}" data-field="ready">${g.ready ? "ready" : "not ready"}</span>` +
      `<span class="pill ${healthy ? "ok" : "bad"}" data-field="health">${healthy ? "healthy" : "unhealthy"}</span>` +
      (g.alerts.length ? `<span class="pill bad" data-field="alerts">${g.alerts.length} open: ${esc(g.alerts.map((a) => a.kind).join(", "))}</span>` : "") + `</h3>` +
      `<dl class="kv"><dt>model</dt><dd class="mono">${esc(g.model || "?")}</dd>` +
      `<dt>TP</dt><dd data-field="tp">${cur ? cur.ranks.length : "?"}</dd>` +
      `<dt>config</dt><dd data-field="config">overlap ${dflt("overlap", "on")} · HiCache ${dflt("hicache", "off")} · KV dtype ${dflt("kv_cache_dtype", "auto")} · ` +
      `version <b data-field="config-version">${esc(g.config_version !== undefined ? g.config_version : "?")}</b></dd>` +
      `<dt>verdict</dt><dd data-field="reason">${healthy ? "progressing; no open alert" : esc(reasons.join(" · "))}` +
      (g.supervised && !g.ready ? " · not ready: state " + esc(g.state) : "") + `</dd>` +
      `<dt>throughput</dt><dd>${tps === null ? "?" : "≈ " + tps.toFixed(1) + " tok/s"} <span class="muted">(rank 0: bs × iterations/s, last 3 s)</span></dd>` +
      `<dt>queue</dt><dd>${r0 ? "waiting " + r0.waiting + " · running " + r0.running : "?"}` +
      (g.supervised ? " · in flight via the router " + esc(g.inflight) : "") + `</dd>` +
      `<dt>instance</dt><dd class="mono">${cur ? esc(cur.id) : "—"}${g.pid ? " · pid " + esc(g.pid) : ""}</dd></dl>` +
      `<div class="ranks">${chips}</div>${dead}${acts}</div>`;
  }
  function renderFleet() {
    const gs = groups();
    /* P/D pairs: a prefill and a decode group that name each other (config `pair`), or the only two */
    const byName = new Map(gs.map((g) => [g.name, g]));
    const done = new Set();
    let html = "";
    for (const g of gs) {
      if (done.has(g.name)) continue;
      const peerName = cfgOf(g).pair || g.pair;
      const peer = peerName && byName.get(peerName);
      if (peer && !done.has(peer.name)) {
        const [p, d] = g.mode === "prefill" ? [g, peer] : [peer, g];
        html += `<div class="pair" data-pair="${esc(p.name)}+${esc(d.name)}"><p class="muted">P/D pair: ${esc(p.name)} → ${esc(d.name)}</p>` +
          groupCard(p) + groupCard(d) + `</div>`;
        done.add(p.name); done.add(d.name);
      } else { html += groupCard(g); done.add(g.name); }
    }
    const f = $("fleet");
    const open = f.querySelector("details[open]");
    f.innerHTML = html || '<p class="muted">no groups: start tandemd with --groups-config, or point workers at it</p>';
    if (open) { const sel = f.querySelector(`.group[data-group="${open.closest(".group").dataset.group}"] details`); if (sel) sel.open = true; }
  }

  /* ---- audit ------------------------------------------------------------------------------- */
  function auditRows(list, bare) {
    const rows = list.map((a) => `<tr data-action="${esc(a.id)}" data-outcome="${esc(a.outcome)}"><td>${esc(a.id)}</td><td>${esc(when(a.ts_us))}</td>` +
      `<td class="num">${a.finished_us ? ((a.finished_us - a.ts_us) / 1e6).toFixed(1) + " s" : "…"}</td><td>${esc(a.actor)}</td><td>${esc(a.action)}</td>` +
      `<td>${esc(a.target)}</td><td class="mono">${esc(JSON.stringify(a.params || {}))}</td>` +
      `<td><span class="pill ${a.outcome === "ok" ? "ok" : a.outcome === "pending" ? "warn" : "bad"}">${esc(a.outcome)}</span></td><td>${esc(a.detail)}</td></tr>`).join("");
    return bare ? `<table class="audit"><tbody>${rows}</tbody></table>` : rows;
  }
  function renderAudit() {
    $("audit").tBodies[0].innerHTML = auditRows(st.actions) || '<tr><td colspan="9" class="muted">no actions</td></tr>';
  }

  /* ---- actions ----------------------------------------------------------------------------- */
  function disableForRole() {
    const ro = st.role !== "admin";
    for (const b of document.querySelectorAll("[data-act], select[data-kv]")) {
      if (ro) { b.disabled = true; b.title = "read-only token: actions need an admin token"; }
    }
  }
  function describe(g, act, key, value) {
    const inflight = g ? Number(g.inflight || 0) : 0;
    const r0 = g && g.current && g.current.ranks[0] && g.current.ranks[0].latest;
    const work = (r0 ? `${r0.running} running and ${r0.waiting} waiting on rank 0` : "its queue unknown") + `, ${inflight} in flight through the router`;
    const v = g && g.config_version !== undefined ? Number(g.config_version) : null;
    switch (act) {
    case "drain": return { title: `Drain ${g.name}?`, text: `The router stops sending ${g.name} new requests; the requests it already has (${work}) finish first. The group then stays drained (not ready) until it is resumed or restarted.`, steps: ["draining", "drained"] };
    case "resume": return { title: `Resume ${g.name}?`, text: `The router sends ${g.name} requests again (it stops being drained); nothing restarts.`, steps: ["running"] };
    case "restart": return { title: `Restart ${g.name}?`, text: `Group ${g.name} (${g.current ? g.current.ranks.length : "?"} rank(s)) restarts: SIGTERM to its launcher (SIGKILL after 15 s), a new incarnation starts and must pass /ready. Requests it holds now (${work}) are cut. Its config stays version ${v === null ? "?" : v}.`, steps: ["restarting", "starting", "running"] };
    case "reconfigure": {
      const pairNote = key === "kv_cache_dtype" ? ` The KV dtype is pair-wide: ${g.name} and its P/D pair group (when it has one) both restart with it.` : "";
      return { title: `Set ${key}=${value} on ${g.name}?`, text: `A new config version (${v === null ? "?" : v + 1}) of ${g.name} with ${key}=${value}: drain (${work} finish first), restart with the override file, wait for /ready.${pairNote}`, steps: ["draining", "restarting", "starting", "running"] };
    }
    }
    return { title: act, text: "", steps: [] };
  }
  function openConfirm(group, act, key, value) {
    const g = groups().find((x) => x.name === group);
    if (!g) return;
    const d = describe(g, act, key, value);
    const dlg = $("confirm");
    $("confirm-title").textContent = d.title;
    $("confirm-text").textContent = d.text;
    $("confirm-steps").innerHTML = "";
    $("confirm-result").textContent = "";
    $("confirm-result").className = "";
    $("confirm-audit").tBodies[0].innerHTML = "";
    $("confirm-ok").hidden = false;
    $("confirm-ok").disabled = false;
    $("confirm-cancel").textContent = "cancel";
    dlg.dataset.state = "asking";
    dlg.dataset.group = group; dlg.dataset.act = act; dlg.dataset.key = key || ""; dlg.dataset.value = value || "";
    if (!dlg.open) dlg.showModal();
  }
  document.addEventListener("click", (e) => {
    const b = e.target.closest("button[data-act]");
    if (b) openConfirm(b.dataset.group, b.dataset.act, b.dataset.key, b.dataset.value);
  });
  document.addEventListener("change", (e) => {
    const s = e.target.closest("select[data-kv]");
    if (s && s.value) { openConfirm(s.dataset.kv, "reconfigure", "kv_cache_dtype", s.value); s.value = ""; }
  });
  $("confirm-cancel").addEventListener("click", () => { if (!st.actionBusy) $("confirm").close(); });
  $("confirm-ok").addEventListener("click", () => runAction());
  async function runAction() {
    const dlg = $("confirm");
    const { group, act, key, value } = dlg.dataset;
    $("confirm-ok").disabled = true;
    $("confirm-cancel").textContent = "close";
    dlg.dataset.state = "running";
    st.actionBusy = true;
    const steps = $("confirm-steps");
    let last = "";
    const note = (s, key) => { /* one line per state; the line on screen shows its time */
      if (key === last && steps.lastElementChild) { steps.lastElementChild.textContent = s; return; }
      last = key;
      for (const li of steps.children) li.className = "done";
      const li = document.createElement("li");
      li.className = "now"; li.textContent = s; li.dataset.step = key;
      steps.appendChild(li);
    };
    const t0 = Date.now();
    note("requested " + act + (key ? " " + key + "=" + value : "") + " at " + new Date().toLocaleTimeString(), "requested");
    const watch = setInterval(async () => {
      try {
        const s = await api("GET", "/api/v1/status");
        st.status = s;
        const g = (s.groups || []).find((x) => x.name === group);
        if (g) note(`${g.state}${g.ready ? ", ready" : ", not ready"} (at ${((Date.now() - t0) / 1000).toFixed(1)} s)`, g.state + g.ready);
      } catch (e) { /* the outcome below says what happened */ }
    }, 300);
    const path = `/api/v1/groups/${encodeURIComponent(group)}/${act}`;
    const body = act === "reconfigure" ? { [key]: value } : {};
    let res = null, err = null;
    try { res = await api("POST", path, body); } catch (e) { err = e; }
    clearInterval(watch);
    st.actionBusy = false;
    const out = $("confirm-result");
    if (err) {
      out.textContent = (err.status === 403 ? "refused by tandemd: " : "failed: ") + err.message;
      out.className = "error";
      dlg.dataset.state = err.status === 403 ? "forbidden" : "failed";
      dlg.dataset.status = String(err.status || "");
    } else {
      out.textContent = "outcome: " + (res.outcome || "ok") + (res.detail ? " — " + res.detail : "") +
        (res.config_version !== undefined ? " (config version " + res.config_version + ")" : "");
      out.className = res.outcome && res.outcome !== "ok" ? "error" : "";
      dlg.dataset.state = "done";
      dlg.dataset.outcome = res.outcome || "ok";
    }
    try {
      const a = await api("GET", "/api/v1/actions?limit=20");
      st.actions = a.actions || [];
      const mine = st.actions.filter((x) => x.target === group && x.ts_us >= t0 * 1000 - 1e6).slice(0, 3);
      $("confirm-audit").tBodies[0].innerHTML = auditRows(mine) || '<tr><td class="muted">no audit row (the API refused before the action started)</td></tr>';
    } catch (e) { /* shown in the banner by the next poll */ }
    pollSlow().catch(() => {});
    schedule();
  }

  /* ---- the views of console-views.js, and boot --------------------------------------------- */
  /* console-views.js (loaded after this file) reaches these and registers its renderers in
   * `views` (lockstep, transfers, alerts, plots: the render of the view; loadPlots). */
  const views = {};
  window.tandemConsole = { $, esc, when, secs, nowUs, COLS, st, api, schedule, groups, rankAge, auditRows, views };
  /* Every deferred script has run by DOMContentLoaded: the views are registered before anything
   * renders. */
  document.addEventListener("DOMContentLoaded", () => {
    if (st.token) {
      $("login").hidden = true;
      signIn(st.token).catch(() => showLogin("tandemd unreachable"));
    } else {
      showLogin("");
    }
  });
})();
