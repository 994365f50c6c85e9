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
    else if (v === "lockstep") renderLockstep();
    else if (v === "transfers") renderTransfers();
    else if (v === "alerts") renderAlerts();
    else if (v === "audit") renderAudit();
    else if (v === "plots") renderPlotControls();
    disableForRole();
  }
  function showView(v) {
    if (!$("view-" + v)) v = "fleet";
    st.view = v;
    if (location.hash !== "#" + v) history.replaceState(null, "", "#" + v);
    for (const s of document.querySelectorAll("section.view")) s.hidden = s.id !== "view-" + v;
    for (const b of document.querySelectorAll("#nav button")) b.classList.toggle("active", b.dataset.view === v);
    if (v === "transfers") pollSlow().catch(() => {});
    if (v === "plots") loadPlots();
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

  /* ---- boot -------------------------------------------------------------------------------- */
  if (st.token) {
    $("login").hidden = true;
    signIn(st.token).catch(() => showLogin("tandemd unreachable"));
  } else {
    showLogin("");
  }
})();
