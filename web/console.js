/* tandem console: polls tandemd's REST API once a second and renders alerts, a per-rank view of
 * the loop (iter, path, in-collective age), groups with their actions, and the audit log.
 * The bearer token comes from ?token= (kept in sessionStorage, removed from the address bar). */
"use strict";
(function () {
  const params = new URLSearchParams(location.search);
  if (params.get("token")) {
    sessionStorage.setItem("tandem-token", params.get("token"));
    history.replaceState(null, "", location.pathname);
  }
  const token = sessionStorage.getItem("tandem-token") || "";
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s === undefined || s === null ? "" : s)
    .replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const when = (us) => (us ? new Date(us / 1000).toLocaleTimeString() : "");

  async function api(method, path, body) {
    const r = await fetch(path, {
      method,
      headers: Object.assign({ Authorization: "Bearer " + token },
        body ? { "Content-Type": "application/json" } : {}),
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    let j = null;
    try { j = JSON.parse(text); } catch (e) { j = { raw: text }; }
    if (!r.ok) throw new Error((j && j.error && j.error.message) || r.status + " " + r.statusText);
    return j;
  }

  function rows(tbody, html) { tbody.innerHTML = html || '<tr><td colspan="6" class="muted">none</td></tr>'; }

  function summary(a) {
    if (a.summary) return a.summary;
    const ev = a.evidence || {};
    if (ev.summary) return ev.summary;
    if (ev.minority_ranks) return "minority ranks " + ev.minority_ranks.join(",") + (ev.op ? " in " + ev.op : "");
    return JSON.stringify(ev).slice(0, 160);
  }

  function renderAlerts(list) {
    const open = list.filter((a) => a.state === "open").length;
    $("alert-count").textContent = open + " open";
    $("alert-count").className = "pill " + (open ? "bad" : "ok");
    rows($("alerts").tBodies[0], list.map((a) =>
      `<tr class="${a.state === "open" ? "bad" : ""}"><td>${esc(a.kind || a.class)}</td><td>${esc(a.group)}</td>` +
      `<td>${esc(a.state)}</td><td>${esc(when(a.opened_us))}</td><td>${esc(summary(a))}</td>` +
      `<td>${esc(a.resolved_by)}${a.policy === "auto" && a.state === "open" ? " (auto remedy pending)" : ""}</td></tr>`).join(""));
  }

  function renderRanks(ranks) {
    const now = Date.now() * 1000;
    $("heatmap").innerHTML = ranks.map((r) => {
      const s = r.latest || {};
      const inColl = s.in_coll;
      const collAge = inColl ? (now - inColl.since_us) / 1e6 : 0;
      const stale = r.age_ms > 2000;
      const cls = stale || collAge > 1 ? "bad" : inColl ? "warn" : "ok";
      return `<div class="rank ${cls}" data-group="${esc(r.group)}" data-rank="${esc(r.rank)}">` +
        `<b>${esc(r.group)}</b> rank ${esc(r.rank)}<br>iter ${esc(s.iter)} · ${esc(s.path)}<br>` +
        `coll_seq ${esc(s.coll_seq)}` + (inColl ? `<br>in ${esc(inColl.op)} #${esc(inColl.seq)} ${collAge.toFixed(1)} s` : "") +
        `<br>run ${esc(s.running)} · wait ${esc(s.waiting)}` + (stale ? `<br>no sample ${(r.age_ms / 1000).toFixed(1)} s` : "") +
        `</div>`;
    }).join("") || '<span class="muted">no ranks reporting</span>';
  }

  function renderGroups(groups, ranks) {
    const names = new Map();
    for (const g of groups) names.set(g.name || g.group, g);
    for (const r of ranks) if (!names.has(r.group)) names.set(r.group, { name: r.group, role: r.role });
    const html = [...names.entries()].map(([name, g]) => {
      const n = ranks.filter((r) => r.group === name).length;
      return `<tr><td>${esc(name)}</td><td>${esc(g.role)}</td><td>${n}</td><td>${esc(g.state || "")}</td>` +
        `<td><button data-act="drain" data-group="${esc(name)}">drain</button>` +
        `<button data-act="restart" data-group="${esc(name)}">restart</button>` +
        `<button data-act="overlap-off" data-group="${esc(name)}">overlap off</button></td></tr>`;
    }).join("");
    rows($("groups").tBodies[0], html);
  }

  function renderActions(list) {
    rows($("actions").tBodies[0], list.slice(0, 50).map((a) =>
      `<tr><td>${esc(when(a.ts_us))}</td><td>${esc(a.actor)}</td><td>${esc(a.action)}</td>` +
      `<td>${esc(a.target)}</td><td>${esc(a.outcome)}${a.detail ? " — " + esc(a.detail) : ""}</td></tr>`).join(""));
  }

  document.addEventListener("click", async (e) => {
    const b = e.target.closest("button[data-act]");
    if (!b) return;
    const g = encodeURIComponent(b.dataset.group);
    const act = b.dataset.act;
    const path = act === "overlap-off" ? `/api/v1/groups/${g}/reconfigure` : `/api/v1/groups/${g}/${act}`;
    const body = act === "overlap-off" ? { overlap: false } : {};
    $("action-result").textContent = act + " " + b.dataset.group + "…";
    try {
      const r = await api("POST", path, body);
      $("action-result").textContent = act + " " + b.dataset.group + ": " + JSON.stringify(r);
    } catch (err) {
      $("action-result").textContent = act + " " + b.dataset.group + " failed: " + err.message;
    }
  });

  /* Each panel renders on its own: ranks and live alerts come from tandemd's memory and keep
   * working while the database is down; the rest says why it is empty. */
  async function tick() {
    const get = (p) => api("GET", p);
    const [health, ranks, groups, alerts, actions] = await Promise.allSettled([
      fetch("/health").then((r) => r.json()),
      get("/api/v1/ranks"), get("/api/v1/groups"), get("/api/v1/alerts?source=live"),
      get("/api/v1/actions?limit=50"),
    ]);
    const val = (r, key) => (r.status === "fulfilled" ? r.value[key] || [] : []);
    if (health.status === "fulfilled") {
      const h = health.value;
      $("cp-status").textContent = "tandemd " + h.status + " · db " + h.db;
      $("cp-status").className = "pill " + (h.db === "up" ? "ok" : "warn");
    } else {
      $("cp-status").textContent = "tandemd unreachable";
      $("cp-status").className = "pill bad";
    }
    const errors = [ranks, groups, alerts, actions].filter((r) => r.status === "rejected");
    renderAlerts(val(alerts, "alerts"));
    renderRanks(val(ranks, "ranks"));
    renderGroups(val(groups, "groups"), val(ranks, "ranks"));
    renderActions(val(actions, "actions"));
    $("updated").textContent = "updated " + new Date().toLocaleTimeString() +
      (errors.length ? " · " + errors[0].reason.message : "");
    document.body.dataset.ready = "1";
  }
  tick();
  setInterval(tick, 1000);
})();
