// console.mjs — the operator console in headless Chromium through WebDriver (selenium-webdriver),
// against the tandemd, PostgreSQL and CPU workers test-console.sh started. Prints TAP lines; the
// shell prints the plan. Asserts DOM state; saves a screenshot of every view to $SHOTS.
//
// env: URL (tandemd), ADMIN (admin token), PSQL (a psql command line for the test database),
//      SHOTS (screenshot folder), CHROMEDRIVER, CHROMIUM, PROFILE (a fresh --user-data-dir)
import { Builder, By, until } from "selenium-webdriver";
import chrome from "selenium-webdriver/chrome.js";
import { execFileSync } from "node:child_process";
import { writeFileSync, mkdirSync } from "node:fs";

const { URL: BASE, ADMIN, SHOTS, CHROMEDRIVER, CHROMIUM, PROFILE } = process.env;
const SLACK = 2; // timing assertions carry 2x slack (the CI host has 2 cores)
let n = 0, failed = 0;
const ok = (c, what) => { n++; if (!c) failed++; console.log(`${c ? "ok" : "not ok"} ${n} - ${what}`); };
const note = (s) => console.log("# " + s);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function api(method, path, body, token = ADMIN) {
  const r = await fetch(BASE + path, {
    method, headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
    body: body ? JSON.stringify(body) : undefined,
  });
  const t = await r.text();
  let j = null; try { j = JSON.parse(t); } catch { j = { raw: t }; }
  return { status: r.status, body: j };
}
async function poll(fn, ms, step = 100) { // → the first truthy fn() within ms, else null
  const end = Date.now() + ms;
  for (;;) {
    try { const v = await fn(); if (v) return v; } catch { /* retry */ }
    if (Date.now() > end) return null;
    await sleep(step);
  }
}

const opts = new chrome.Options();
opts.setChromeBinaryPath(CHROMIUM);
opts.addArguments("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
  `--user-data-dir=${PROFILE}`, "--window-size=1400,1000");
const driver = await new Builder().forBrowser("chrome").setChromeOptions(opts)
  .setChromeService(new chrome.ServiceBuilder(CHROMEDRIVER)).build();
mkdirSync(SHOTS, { recursive: true });
const shot = async (name) => writeFileSync(`${SHOTS}/${name}.png`, await driver.takeScreenshot(), "base64");
const $ = (css) => driver.findElement(By.css(css));
const $$ = (css) => driver.findElements(By.css(css));
const js = (code, ...args) => driver.executeScript(code, ...args);
// the page re-renders its views in place: read through the DOM, not element references
const text = (css) => js("const e = document.querySelector(arguments[0]); return e ? e.textContent : ''", css);
const view = (v) => js(`document.querySelector('#nav button[data-view="${v}"]').click()`);
const exists = (css) => js("return document.querySelector(arguments[0]) !== null", css);

async function login(token) {
  await $("#login-token").clear();
  await $("#login-token").sendKeys(token);
  await $("#login-submit").click();
}
async function confirmAction(css) { // → the dialog's final state
  await js("document.querySelector(arguments[0]).click()", css);
  await driver.wait(until.elementIsVisible($("#confirm")), 5000);
  return js("return document.getElementById('confirm-text').textContent");
}
async function dialogDone(ms) {
  return poll(async () => {
    const s = await js("return document.getElementById('confirm').dataset.state");
    return s && s !== "running" && s !== "asking" ? s : null;
  }, ms, 200);
}

try {
  // ---- headers: CSP, cache lifetimes, versioned assets ---------------------------------------
  const page = await fetch(BASE + "/console");
  const html = await page.text();
  const csp = page.headers.get("content-security-policy") || "";
  ok(/script-src 'self'/.test(csp) && !/unsafe-inline/.test(csp) && /default-src 'none'|default-src 'self'/.test(csp) &&
    !/<script>|<script [^>]*>[^<]/.test(html) && !/ on[a-z]+=/.test(html), `the page: a strict CSP, no inline script (${csp})`);
  const js1 = (html.match(/src="(\/console\/console\.js\?v=[0-9]+)"/) || [])[1];
  const asset = js1 ? await fetch(BASE + js1) : null;
  ok(/no-cache/.test(page.headers.get("cache-control") || "") && asset && asset.status === 200 &&
    /immutable/.test(asset.headers.get("cache-control") || ""), `versioned assets (${js1}) immutable, the page revalidated`);
  // ---- a page load with 1M telemetry rows in PostgreSQL --------------------------------------
  const t0 = Date.now();
  await driver.get(BASE + "/console");
  const blocked = await $("#login").isDisplayed();
  ok(blocked && !(await exists("body[data-ready]")), "no token: the blocking sign-in screen, no data views");
  await login("wrong-token");
  const err = await poll(async () => (await text("#login-error")) || null, 5000);
  ok(/401/.test(err || "") && await $("#login").isDisplayed(), `a wrong token is refused and the sign-in stays (${err})`);
  await shot("login");
  await login(ADMIN);
  await driver.wait(until.elementLocated(By.css("body[data-ready='1']")), 10000);
  const loadMs = await js("return Number(document.body.dataset.readyMs)");
  note(`page load to first data: ${Math.round(loadMs)} ms (navigation start → rendered; 1M sample rows in PostgreSQL), wall ${Date.now() - t0} ms incl. sign-in`);
  const url = await driver.getCurrentUrl();
  ok(!url.includes(ADMIN) && await js("return sessionStorage.getItem('tandem-token')") === ADMIN &&
    await js("return document.body.dataset.auth") === "admin", "signed in as admin; the token is in sessionStorage, not the URL");

  // reload: timed from navigation start to the first rendered data, the session's token reused
  await driver.navigate().refresh();
  await driver.wait(until.elementLocated(By.css("body[data-ready='1']")), 10000);
  const reloadMs = await js("return Number(document.body.dataset.readyMs)");
  note(`reload to first data: ${Math.round(reloadMs)} ms; ` + await js("return performance.getEntriesByType('resource').map(r => r.name.replace(/^.*\\/\\/[^/]*/, '') + ' ' + Math.round(r.startTime) + '+' + Math.round(r.duration)).join(', ')"));
  ok(reloadMs > 0 && reloadMs <= 1000 * SLACK, `page load with 1M telemetry rows ≤ 1 s (2x slack): ${Math.round(reloadMs)} ms`);

  // ---- fleet -------------------------------------------------------------------------------
  await view("fleet");
  const fleetOk = await poll(async () => (await text('.group[data-group="b"] [data-field="tp"]')) === "2" &&
    (await $$('.group[data-group="b"] .rank[data-verdict="ok"]')).length === 2, 20000);
  ok(fleetOk, "fleet: group b with TP 2, both ranks green");
  const cfgText = await text('.group[data-group="b"] [data-field="config"]');
  ok(/overlap/.test(cfgText) && /HiCache/.test(cfgText) && /KV dtype/.test(cfgText) && /version/.test(cfgText),
    "fleet: the group's config (overlap, HiCache, KV dtype, version)");
  await shot("fleet");

  // ---- rank_idle_path on rank 1 → the lockstep view and the alert --------------------------
  const status = (await api("GET", "/api/v1/status")).body;
  const admin = status.groups.find((g) => g.name === "b").admin_url;
  const arm = await fetch(admin + "/admin/faults", { method: "POST", headers: { Authorization: "Bearer " + ADMIN },
    body: JSON.stringify({ name: "rank_idle_path", rank: 1, count: 0, after_iter: 0 }) }).then((r) => r.text());
  await view("lockstep");
  const tArm = Date.now();
  fetch(admin + "/generate", { method: "POST", body: JSON.stringify({ input_ids: [2, 3, 4, 5], max_new_tokens: 8 }) }).catch(() => {});
  const seenOdd = await poll(async () => exists('.ls-row.odd[data-rank="1"]') && exists('#ls-ranks tr.odd[data-rank="1"]'), 15000);
  const tOdd = Date.now() - tArm;
  const apiAlert = await poll(async () => ((await api("GET", "/api/v1/alerts?source=live")).body.alerts || [])
    .find((a) => a.kind === "RANK_DIVERGENCE" && a.group === "b"), 10000);
  const tApi = Date.now() - tArm;
  ok(/armed/.test(arm) && seenOdd, `lockstep: rank 1 highlighted in the heatmap and the rank table ${tOdd} ms after the request`);
  ok(!!seenOdd && !(await exists('.ls-row.odd[data-rank="0"]')), "lockstep: rank 0 is not highlighted");
  await shot("lockstep-divergence");
  await view("alerts");
  const evOk = await poll(async () => exists('.evidence tr.odd[data-rank="1"]') &&
    /allreduce|broadcast|allgather/.test(await text('.evidence [data-field="op"]')), 3000 * SLACK);
  const tEv = Date.now() - tArm;
  note(`RANK_DIVERGENCE listed by the API ${tApi} ms after the request; its evidence shown ${tEv} ms after`);
  const minority = await text('.evidence [data-field="minority"]');
  ok(!!apiAlert && evOk && minority === "1" && tEv - Math.min(tApi, tEv) <= 3000 * SLACK,
    `alert view: the divergence's per-rank table with rank 1 marked as the minority and the op (${await text('.evidence [data-field="op"]')})`);
  const rb = await poll(async () => (await exists('.evidence a[href="/console/alerts.md"]')) && /RANK_DIVERGENCE/.test(await text(".evidence pre.runbook")), 3000);
  ok(!!rb,
    "alert view: the runbook entry (docs/alerts.md) linked and quoted");
  await view("fleet");
  const redB = await poll(async () => exists('.group[data-group="b"] .rank[data-rank="1"][data-verdict="bad"]'), 3000);
  ok(!!redB, "fleet: the diverged rank is red while it still sends samples");
  await view("alerts");
  await shot("alert-evidence");

  // ---- restart through the confirmation dialog ---------------------------------------------
  await view("fleet");
  const txt = await confirmAction('button[data-act="restart"][data-group="b"]');
  ok(/Restart b/.test(await text("#confirm-title")) && /SIGTERM/.test(txt) && /cut/.test(txt), `restart dialog says what happens: "${txt.slice(0, 90)}…"`);
  await shot("confirm-dialog");
  const actionsBefore = (await api("GET", "/api/v1/actions?limit=1")).body.actions[0].id;
  await $("#confirm-ok").click();
  const st1 = await dialogDone(90000);
  const steps = await js("return [...document.querySelectorAll('#confirm-steps li')].map(l => l.textContent)");
  note("restart progress: " + steps.join(" | "));
  ok(st1 === "done" && steps.length >= 3 && steps.some((s) => /^restarting|^starting/.test(s)),
    "the dialog shows the restart's progress until done");
  const auditOk = await exists('#confirm-audit tr[data-outcome="ok"]') &&
    /restart/.test(await text("#confirm-audit")) && (await api("GET", "/api/v1/actions?limit=1")).body.actions[0].id > actionsBefore;
  ok(auditOk, "the dialog shows the audit row: restart of b, outcome ok");
  await $("#confirm-cancel").click();
  await view("alerts");
  const resolved = await poll(async () => exists(`#alerts tr[data-alert="${apiAlert && apiAlert.id}"][data-state="resolved"]`), 40000, 500);
  ok(!!resolved, "the divergence alert resolves after the restart");

  // ---- overlap off: a new config version -----------------------------------------------------
  await view("fleet");
  await poll(async () => exists('.group[data-group="b"] [data-field="ready"].ok'), 60000, 250);
  const v0 = Number(await text('.group[data-group="b"] [data-field="config-version"]'));
  await confirmAction('button[data-act="reconfigure"][data-key="overlap"][data-value="off"][data-group="b"]');
  const otext = await text("#confirm-text");
  ok(/overlap=off/.test(otext) && new RegExp(`version \\(${v0 + 1}\\)`).test(otext), `overlap dialog names the new config version: "${otext.slice(0, 80)}…"`);
  await $("#confirm-ok").click();
  const st2 = await dialogDone(90000);
  await $("#confirm-cancel").click();
  const v1 = await poll(async () => { const v = Number(await text('.group[data-group="b"] [data-field="config-version"]')); return v === v0 + 1 ? v : null; }, 10000);
  ok(st2 === "done" && v1 === v0 + 1 && /overlap off/.test(await text('.group[data-group="b"] [data-field="config"]')),
    `overlap off: config version ${v0} → ${v1}, the fleet shows overlap off`);
  await shot("fleet-after");

  // ---- the other views ------------------------------------------------------------------------
  await view("transfers");
  await poll(async () => exists("#xfer-summary table, #xfer-summary p"), 5000);
  await shot("transfers");
  // load on the (restarted) group, so the plots have tokens/s, TTFT and ITL to show
  const admin2 = (await api("GET", "/api/v1/status")).body.groups.find((g) => g.name === "b").admin_url;
  const gen = (k) => fetch(admin2 + "/generate", { method: "POST",
    body: JSON.stringify({ input_ids: [2, 3 + k, 4, 5 + k], max_new_tokens: 24, ignore_eos: true }) }).then((r) => r.text());
  for (let round = 0; round < 3; round++) await Promise.all([0, 1, 2, 3].map((k) => gen(4 * round + k)));
  const stats = await poll(async () => {
    const inst = (await api("GET", "/api/v1/ranks?group=b")).body.ranks.filter((r) => r.rank === 0 && r.age_ms < 5000)[0];
    const h = (await api("GET", `/api/v1/ranks/${inst.instance_id}/0/history?since_us=0&limit=10000`)).body.samples || [];
    const last = h[h.length - 1] || {};
    return last.tokens_out > 0 && last.requests_done >= 12 && h.some((x) => x.ttft_p50_us > 0) && h.some((x) => x.itl_p99_us > 0) && last.kv_pages_total > 0 ? { last, n: h.length } : null;
  }, 15000, 500);
  ok(!!stats && stats.last.requests_done >= 12 && stats.last.recv_us >= stats.last.ts_us,
    `history: rank 0 carries the serving statistics (tokens_out ${stats && stats.last.tokens_out}, requests_done ${stats && stats.last.requests_done}, ` +
    `KV ${stats && stats.last.kv_pages_used}/${stats && stats.last.kv_pages_total} pages, ingest lag ${stats && (stats.last.recv_us - stats.last.ts_us) / 1000} ms)`);
  await view("plots");
  const want = ["plot-tps", "plot-ttft", "plot-itl", "plot-queue", "plot-kv", "plot-xfer", "plot-corruption", "plot-lag"];
  const maxOf = (id) => js("const e = document.getElementById(arguments[0]); return e && e.dataset.max ? JSON.parse(e.dataset.max) : null", id);
  const plotted = await poll(async () => {
    if ((await $$("#plots .uplot canvas")).length < want.length) return null;
    const m = {};
    for (const id of want) m[id] = await maxOf(id);
    return m["plot-tps"] && m["plot-tps"]["tok/s"] > 0 && m["plot-ttft"]["TTFT p50"] > 0 ? m : null;
  }, 15000, 500);
  ok(!!plotted && want.every((id) => plotted[id]), `plots: ${want.length} uPlot charts (tokens/s, TTFT, ITL, queue, KV/host, transfers, corruption, ingest lag)`);
  ok(!!plotted && plotted["plot-tps"]["tok/s"] > 0 && plotted["plot-ttft"]["TTFT p50"] > 0 && plotted["plot-ttft"]["TTFT p99"] > 0 &&
    plotted["plot-itl"]["ITL p99"] > 0 && plotted["plot-kv"]["device total"] > 0 && plotted["plot-lag"].lag > 0,
    `plots: non-zero series after 12 requests (peak ${plotted && plotted["plot-tps"]["tok/s"].toFixed(1)} tok/s, TTFT p99 ${plotted && plotted["plot-ttft"]["TTFT p99"]} ms, ` +
    `ITL p99 ${plotted && plotted["plot-itl"]["ITL p99"]} ms, ingest lag ≤ ${plotted && plotted["plot-lag"].lag} ms)`);
  ok(!/not in the REST API/.test(await text("#view-plots")), "plots: no 'not in the REST API' note");
  // a long window reads one row per step from PostgreSQL
  await js("const s = document.getElementById('plot-window'); s.value = '86400'; s.dispatchEvent(new Event('change'))");
  const stepped = await poll(async () => /one per 43\.2 s/.test(await text("#plot-note")) && (await maxOf("plot-tps")) ? await text("#plot-note") : null, 10000, 300);
  // this incarnation is seconds old: one or two steps of 43.2 s, so only the series' presence is checked
  ok(!!stepped && "tok/s" in (await maxOf("plot-tps")) && "TTFT p99" in (await maxOf("plot-ttft")),
    `plots over 24 h: one row per step from PostgreSQL, the same series (${stepped})`);
  await js("const s = document.getElementById('plot-window'); s.value = '300'; s.dispatchEvent(new Event('change'))");
  await poll(async () => !/one per/.test(await text("#plot-note")) && (await maxOf("plot-ttft")), 10000, 300);
  await driver.manage().window().setRect({ width: 1400, height: 2350 }); // every plot in the picture
  await sleep(300);
  await shot("plots");
  await driver.manage().window().setRect({ width: 1400, height: 1000 });
  await view("audit");
  await poll(async () => exists('#audit tr[data-outcome="ok"]'), 5000);
  await shot("audit");

  // ---- 64 simulated ranks at 5 samples/s: the displayed iteration keeps up ---------------------
  const sim = { stop: false, iter: 0 };
  const inst = "00000000000051a0";
  const simLoop = (async () => {
    const seq = new Array(64).fill(0);
    while (!sim.stop) {
      const t = Date.now();
      sim.iter++;
      const now = t * 1000;
      await Promise.all(seq.map((_, r) => api("POST", "/api/v1/telemetry", {
        v: 1, worker: "sim", group: "sim", role: "decode", instance_id: inst, rank: r, seq: ++seq[r],
        samples: [{ ts_us: now, iter: sim.iter, path: "batch", plan_hash: "00000000000000ab", coll_seq: sim.iter * 3,
          coll_hash: "0000000000000abc", in_coll: null, bs: 4, waiting: 0, running: 4 }], events: [] })));
      await sleep(Math.max(0, 200 - (Date.now() - t)));
    }
  })();
  await view("lockstep");
  await poll(async () => { await js("const s=document.getElementById('ls-group'); if ([...s.options].some(o=>o.value==='sim')) { s.value='sim'; s.dispatchEvent(new Event('change')); return true }"); return exists('#ls-ranks tr[data-rank="63"]'); }, 10000);
  await sleep(3000);
  let worst = 0;
  for (let i = 0; i < 10; i++) {
    const apiIter = ((await api("GET", "/api/v1/ranks?group=sim")).body.ranks || []).reduce((m, r) => Math.max(m, r.latest ? r.latest.iter : 0), 0);
    const shown = await js("return Math.max(...[...document.querySelectorAll('#ls-ranks tr[data-iter]')].map(t => Number(t.dataset.iter)))");
    worst = Math.max(worst, (apiIter - shown) / 5);
    await sleep(300);
  }
  const rate = sim.iter;
  sim.stop = true;
  await simLoop;
  note(`64 simulated ranks at 5 samples/s (${rate} rounds): the page's iteration lagged the API's by at most ${worst.toFixed(1)} s`);
  ok(worst < 2 * SLACK, `64 ranks × 5 samples/s: displayed iteration lags the API's < 2 s (2x slack): ${worst.toFixed(1)} s`);
  await shot("lockstep-64");
  const mode = await text("#live");
  note("live mode: " + mode);

  // ---- a read token ------------------------------------------------------------------------
  const rt = await api("POST", "/api/v1/tokens", { name: "viewer", role: "read" });
  await $("#logout").click();
  ok(await $("#login").isDisplayed() && !(await js("return sessionStorage.getItem('tandem-token')")), "sign out: back to the sign-in screen, the token forgotten");
  await login(rt.body.token);
  await poll(async () => (await js("return document.body.dataset.auth")) === "read", 5000);
  await view("fleet");
  await poll(async () => exists('.group[data-group="b"] button[data-act]'), 10000);
  const enabled = await js("return [...document.querySelectorAll('button[data-act], select[data-kv]')].filter(b => !b.disabled).length");
  const total = await js("return document.querySelectorAll('button[data-act]').length");
  ok(total > 0 && enabled === 0, `read token: all ${total} action buttons disabled`);
  const lastId = (await api("GET", "/api/v1/actions?limit=1")).body.actions[0].id;
  await js("const b = document.querySelector('button[data-act=\"restart\"][data-group=\"b\"]'); b.disabled = false; b.click();");
  await driver.wait(until.elementIsVisible($("#confirm")), 5000);
  await js("document.getElementById('confirm-ok').click()");
  const st3 = await dialogDone(10000);
  const res3 = await text("#confirm-result");
  ok(st3 === "forbidden" && /403/.test(res3), `read token: a forced restart gets the API's 403 shown ("${res3}")`);
  const lastId2 = (await api("GET", "/api/v1/actions?limit=1")).body.actions[0].id;
  ok(lastId2 === lastId, "read token: no action ran (the audit log is unchanged)");
  await shot("read-token-refused");
} catch (e) {
  ok(false, "browser session: " + (e && e.stack ? e.stack.split("\n").slice(0, 3).join(" | ") : e));
  try { await shot("failure"); } catch { /* none */ }
} finally {
  try {
    const logs = await driver.manage().logs().get("browser");
    for (const l of logs.filter((x) => x.level.name === "SEVERE")) note("browser: " + l.message.slice(0, 300));
  } catch { /* no log */ }
  await driver.quit();
}
console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
