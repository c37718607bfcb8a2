// coordrun status page: keeps the server-rendered page current from the
// event stream (/api/events) and browses locks and the tree through the
// JSON API. It builds the same markup as page.html, with text nodes only
// (never HTML from data).
"use strict";
(function () {
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));

  // h("tag.class", {attr: v}, child, ...): children are nodes or text.
  function h(spec, attrs, ...kids) {
    const [tag, ...cls] = spec.split(".");
    const el = document.createElement(tag);
    if (cls.length) el.className = cls.join(" ");
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const k of kids.flat()) {
      if (k === undefined || k === null || k === false) continue;
      el.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return el;
  }
  const svg = (tag, attrs) => {
    const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    return el;
  };
  const isZero = (t) => !t || t.startsWith("0001-01-01");

  // The server's clock, as of the last state: ages are counted from it.
  let skew = 0;
  function serverNow() { return Date.now() - skew; }

  function fmtDuration(ms) {
    if (ms < 0) ms = 0;
    const s = Math.floor(ms / 1000);
    const p2 = (n) => String(n).padStart(2, "0");
    if (ms < 1000) return Math.floor(ms) + "ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
    if (ms < 3600000) return Math.floor(s / 60) + "m" + p2(s % 60) + "s";
    if (ms < 48 * 3600000) return Math.floor(s / 3600) + "h" + p2(Math.floor(s % 3600 / 60)) + "m";
    return Math.floor(s / 86400) + "d" + p2(Math.floor(s % 86400 / 3600)) + "h";
  }
  function fmtUTC(t) {
    if (isZero(t)) return "–";
    return new Date(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }
  function fmtLocal(t) {
    return new Date(t).toLocaleString(undefined, { year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });
  }
  function ageCell(t, extra) {
    const td = h("td.num", Object.assign({}, extra || {}), isZero(t) ? "–" : "");
    if (!isZero(t)) { td.dataset.since = t; td.textContent = fmtDuration(serverNow() - Date.parse(t)); }
    return td;
  }
  function tickAges() {
    const now = serverNow();
    for (const el of $$("[data-since]")) el.textContent = fmtDuration(now - Date.parse(el.dataset.since));
  }
  function localTimes(root) {
    for (const el of $$("time.local", root)) el.textContent = fmtLocal(el.getAttribute("datetime"));
  }

  // replace swaps a container's children, keeping keyboard focus and open
  // <details> on the elements with the same key.
  function replace(container, nodes) {
    const active = document.activeElement;
    let focusKey = null;
    if (active && container.contains(active)) focusKey = keyOf(active);
    const open = new Set($$("details[open]", container).map(keyOf).filter(Boolean));
    container.replaceChildren(...nodes);
    for (const d of $$("details", container)) if (open.has(keyOf(d))) d.open = true;
    if (focusKey) {
      const el = $$("a, summary, button", container).find((e) => keyOf(e) === focusKey);
      if (el) el.focus({ preventScroll: true });
    }
  }
  function keyOf(el) {
    const holder = el.closest("[data-key]");
    return holder ? holder.dataset.key + "|" + el.tagName : null;
  }

  // --- ensemble ---------------------------------------------------------
  function renderHealth(e) {
    const p = $("#health");
    p.className = "health h-" + e.health;
    $(".word", p).textContent = e.health;
    $(".reason", p).textContent = e.reason || "";
    $("#leader").textContent = e.leader || "none";
    document.title = "coordrun member " + e.self + ": " + e.health;
  }
  // shortError keeps a dial error's last part ("connection refused"); the
  // whole text stays in the cell's title.
  function shortError(err) {
    if (!err) return "";
    const parts = err.split(": ");
    return parts[parts.length - 1];
  }
  function renderMembers(e) {
    const rows = e.members.map((m) => {
      const tr = h("tr", { "data-id": m.id, "data-role": m.role, "data-reachable": String(m.reachable), "data-key": "m" + m.id });
      if (m.leader) tr.className = "leader";
      tr.append(
        h("th", { scope: "row" }, m.id, m.leader ? [" ", h("span.badge.lead", {}, "leader")] : null,
          m.self ? [" ", h("span.badge", {}, "this page")] : null),
        h("td", {}, m.role), h("td.num", {}, m.term), h("td.num", {}, m.commit_index),
        h("td.num", {}, m.applied_index), h("td.num", {}, m.lag),
        h("td.reach", m.reachable ? {} : { title: m.error || "" }, m.reachable ? "yes" : h("span.err", {}, "no: " + shortError(m.error))),
        h("td.addr", {}, m.client_addr || ""), h("td.addr", {}, m.peer_addr || ""),
        ageCell(m.started));
      return tr;
    });
    replace($("#members"), rows);
  }
  const metrics = [["sessions", ""], ["znodes", ""], ["watches", ""], ["rate", ""], ["p99_ms", " ms"]];
  function fmtFigure(v) { return Number.isInteger(v) ? String(v) : v.toFixed(2); }
  function renderCharts(samples, now) {
    for (const [key, unit] of metrics) {
      const fig = $('.chart[data-metric="' + key + '"]');
      if (!fig) continue;
      const s = $("svg", fig);
      const w = Number(s.getAttribute("width")), ht = Number(s.getAttribute("height"));
      let peak = 0;
      for (const x of samples) peak = Math.max(peak, x[key]);
      // As the server draws it: the samples' span, 1 to 10 minutes.
      const span = samples.length ? Math.min(Math.max(now - Date.parse(samples[0].at), 60000), 600000) : 600000;
      const scale = peak > 0 ? peak : 1, start = now - span;
      const pts = [];
      for (const x of samples) {
        const at = Date.parse(x.at);
        if (at < start) continue;
        const px = Math.min(w, w * (at - start) / span), py = ht - 1 - (ht - 2) * x[key] / scale;
        pts.push(px.toFixed(1) + "," + py.toFixed(1));
      }
      let line = $("polyline", s);
      if (!line) { line = svg("polyline", {}); s.append(line); }
      line.setAttribute("points", pts.join(" "));
      $(".last", fig).textContent = samples.length ? fmtFigure(samples[samples.length - 1][key]) + unit : "–";
      $(".peak", fig).textContent = "peak " + fmtFigure(peak) + unit;
    }
  }

  // --- locks ------------------------------------------------------------
  function contenderRow(c, cls, label, extra) {
    return h("tr." + cls, Object.assign({ "data-token": c.token, "data-host": c.host, "data-pid": c.pid }, extra || {}),
      h("th", { scope: "row" }, label), h("td", {}, c.host), h("td.num", {}, c.pid), h("td", {}, c.user),
      h("td.cmd", {}, h("code", {}, c.command)), h("td.num", {}, c.token), ageCell(c.since));
  }
  function renderLocks(v) {
    const out = [];
    if (v.error) out.push(h("p.err", {}, v.error));
    for (const l of v.locks) {
      const art = h("article.lock", { "data-lock": l.name, "data-key": "l" + l.name });
      if (l.lingering) art.classList.add("lingering");
      art.append(h("h3", {}, h("a", { href: "?lock=" + encodeURIComponent(l.name) + "#lock-detail", "data-lock-link": l.name }, l.name),
        l.lingering ? [" ", h("span.flag", { title: l.lingering }, "lingering")] : null));
      if (l.lingering) art.append(h("p.warn", {}, l.lingering));
      if (l.error) { art.append(h("p.err", {}, l.error)); out.push(art); continue; }
      const body = h("tbody");
      if (l.holder) {
        const tr = contenderRow(l.holder, "holder", l.holder.stopping ? "stopping" : "holds");
        if (l.holder.stopping) tr.classList.add("stopping");
        body.append(tr);
      } else {
        body.append(h("tr.free", {}, h("th", { scope: "row" }, "free"), h("td", { colspan: 6, title: l.record || "" }, l.free)));
      }
      l.waiting.forEach((w, i) => body.append(contenderRow(w, "waiter", (i + 1) + ". waits", { "data-pos": i + 1 })));
      art.append(h("table.queue", {},
        h("colgroup", {}, ["pos", "host", "pid", "user", "cmd", "token", "age"].map((c) => h("col.c-" + c))),
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Place"), h("th", { scope: "col" }, "Host"),
          h("th.num", { scope: "col" }, "PID"), h("th", { scope: "col" }, "User"), h("th", { scope: "col" }, "Command"),
          h("th.num", { scope: "col" }, "Token"), h("th.num", { scope: "col" }, "For"))),
        body));
      if (l.queued > 100) art.append(h("p.note", {}, l.queued + " in the queue; the first 100 shown."));
      out.push(art);
    }
    if (!v.locks.length && !v.error) out.push(h("p.empty", {}, "No locks under ", h("code", {}, v.root), " yet."));
    replace($("#lock-list"), out);
  }
  let openLock = null, openHolder = null;
  async function showLock(name, push) {
    openLock = name;
    const box = $("#lock-detail");
    let v;
    try {
      const r = await fetch("/api/locks/" + encodeURIComponent(name));
      v = await r.json();
      if (!r.ok) { box.replaceChildren(h("p.err", {}, v.error || r.statusText)); return; }
    } catch (e) { box.replaceChildren(h("p.err", {}, "could not read the lock: " + e.message)); return; }
    if (openLock !== name) return;
    const rows = (v.history || []).map((p) => h("tr", { "data-token": p.token },
      h("td", {}, h("code", {}, p.node)), h("td.num", {}, p.token || "–"), h("td", {}, p.host || ""),
      h("td.num", {}, p.pid || ""), h("td", {}, p.record ? "record: " + p.record : fmtUTC(p.since)),
      h("td", {}, p.record ? "" : (isZero(p.gone) ? "holds" : fmtUTC(p.gone)))));
    if (!rows.length) rows.push(h("tr", {}, h("td", { colspan: 6 }, "No holder seen yet.")));
    const parts = [h("h3", {}, "Recent holders of " + v.name)];
    if (v.error) parts.push(h("p.err", {}, v.error));
    parts.push(h("table.history", {},
      h("colgroup", {}, ["node", "token", "host", "pid", "from", "until"].map((c) => h("col.c-" + c))),
      h("thead", {}, h("tr", {}, ["Node", "Token", "Host", "PID", "Held from", "Until"].map((c) =>
        h(c === "Token" || c === "PID" ? "th.num" : "th", { scope: "col" }, c)))), h("tbody", {}, rows)),
      h("p.note", {}, "Holders this member saw since it started, and the last one the lock's record names."));
    box.replaceChildren(...parts);
    if (push) history.pushState({ lock: name }, "", "?lock=" + encodeURIComponent(name) + "#lock-detail");
  }

  // --- cron -------------------------------------------------------------
  function renderCron(v) {
    const out = [];
    if (v.error) out.push(h("p.err", {}, v.error));
    for (const j of v.jobs) {
      const art = h("article.job", { "data-job": j.name, "data-key": "j" + j.name },
        h("h3", {}, j.name, j.paused_by ? [" ", h("span.flag", {}, "paused by " + j.paused_by)] : null));
      if (j.error) { art.append(h("p.err", {}, j.error)); out.push(art); continue; }
      const next = isZero(j.next) ? h("span.err", {}, j.schedule_error || "none")
        : [h("time.local", { datetime: j.next }, fmtLocal(j.next)), " (your time) · " + j.next_in_zone + " (job's zone)"];
      const hosts = j.hosts.length ? j.hosts.flatMap((x, i) => [i ? ", " : null, h("span", { "data-host": x.host }, x.host)]) : ["none live"];
      art.append(h("dl.facts", {},
        h("dt", {}, "Schedule"), h("dd", {}, h("code", {}, j.schedule), " in " + (j.tz === "Local" ? "the hosts' local time" : j.tz), j.jitter ? ", jitter up to " + j.jitter : null),
        h("dt", {}, "Next"), h("dd", {}, next),
        h("dt", {}, "Hosts"), h("dd.hosts", {}, hosts),
        h("dt", {}, "Command"), h("dd", {}, h("code", {}, (j.command || []).join(" ")))));
      const items = j.firings.map((f) => {
        const sum = h("summary", {}, h("span.chip", { "aria-hidden": "true" }), h("time", { datetime: f.scheduled }, fmtUTC(f.scheduled)),
          " ", h("span.state", {}, f.result), " ", h("span.fhost", {}, f.host),
          f.token ? [" ", h("span.tok", {}, "token " + f.token)] : null,
          f.duration_ms ? [" ", h("span.dur", {}, fmtDuration(f.duration_ms))] : null,
          f.exit_code !== undefined ? [" ", h("span.exit", {}, "exit " + f.exit_code)] : null);
        const body = h("div.fbody", {}, f.reason ? h("p", {}, f.reason) : null);
        if (f.output) {
          body.append(h("pre.output", {}, f.output));
          if (f.output_bytes > f.output.length) body.append(h("p.note", {}, "last " + f.output.length + " of " + f.output_bytes + " bytes"));
        } else body.append(h("p.note", {}, "no output kept"));
        return h("li.f.f-" + f.result, { "data-firing": f.name, "data-state": f.state, "data-result": f.result, "data-host": f.host, "data-token": f.token || 0,
          "data-key": "f" + j.name + "/" + f.name }, h("details", {}, sum, body));
      });
      if (!items.length) items.push(h("li.none", {}, "No firings yet."));
      art.append(h("div.strip", { "aria-hidden": "true" }, j.firings.map((f) =>
        h("span.cell.f-" + f.result, { title: fmtUTC(f.scheduled) + " " + f.result + " on " + f.host }))));
      art.append(h("ol.timeline", { "aria-label": "Recent firings of " + j.name + ", oldest first" }, items));
      out.push(art);
    }
    if (!v.jobs.length && !v.error) out.push(h("p.empty", {}, "No cron jobs under ", h("code", {}, v.root), " yet."));
    replace($("#job-list"), out);
  }

  // --- tree -------------------------------------------------------------
  function childPath(p, name) { return p === "/" ? "/" + name : p + "/" + name; }
  function treeLink(p, text) { return h("a", { href: "?path=" + encodeURIComponent(p) + "#tree", "data-tree": p }, text); }
  const hexZ = (n) => "0x" + BigInt.asUintN(64, BigInt(n)).toString(16);
  function perms(p) { return [[4, "c"], [8, "d"], [1, "r"], [2, "w"], [16, "a"]].filter(([b]) => p & b).map(([, c]) => c).join(""); }
  async function showNode(p, push) {
    const box = $("#node");
    let v;
    try {
      const r = await fetch("/api/tree?path=" + encodeURIComponent(p));
      v = await r.json();
      if (r.status === 400) { box.replaceChildren(h("p.err", {}, v.error)); return; }
    } catch (e) { box.replaceChildren(h("p.err", {}, "could not read the node: " + e.message)); return; }
    $("#tree-path").value = v.path || p;
    box.dataset.path = v.path;
    const crumbs = [treeLink("/", "/")];
    if (v.path !== "/") {
      const parts = v.path.slice(1).split("/");
      let acc = "";
      parts.forEach((part, i) => { acc += "/" + part; crumbs.push(treeLink(acc, part + (i < parts.length - 1 ? "/" : ""))); });
    }
    const nodes = [h("nav.crumbs", { "aria-label": "Path" }, crumbs)];
    if (v.error) {
      nodes.push(h("p.err", {}, v.path + ": " + v.error));
    } else {
      const kids = v.children.map((c) => h("li", {}, treeLink(childPath(v.path, c), c)));
      if (!kids.length) kids.push(h("li.none", {}, v.data_error ? "none readable" : "none"));
      const data = [h("h3", {}, "Data ", h("small", {}, v.stat.dataLength + " bytes"))];
      if (v.data_error) data.push(h("p.err", {}, v.data_error));
      else {
        if (v.json !== undefined) data.push(h("details", { open: true }, h("summary", {}, "JSON"), h("pre", {}, v.json)));
        if (v.text !== undefined) data.push(h("details", { open: v.json === undefined }, h("summary", {}, "Text"), h("pre", {}, v.text)));
        if (v.hex !== undefined) data.push(h("details", { open: v.text === undefined && v.json === undefined }, h("summary", {}, "Hex"), h("pre", {}, v.hex)));
      }
      const st = v.stat;
      const row = (k, val) => h("tr", {}, h("th", { scope: "row" }, k), h("td.num", {}, val));
      const msTime = (ms) => ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "0";
      const stat = h("table.stat", {}, h("tbody", {}, row("czxid", hexZ(st.czxid)), row("mzxid", hexZ(st.mzxid)), row("pzxid", hexZ(st.pzxid)),
        row("ctime", msTime(st.ctime)), row("mtime", msTime(st.mtime)), row("version", st.version), row("cversion", st.cversion),
        row("aversion", st.aversion), row("ephemeralOwner", v.ephemeralOwner || "0x0"), row("dataLength", st.dataLength),
        row("numChildren", st.numChildren)));
      const acl = v.acl_error ? h("p.err", {}, v.acl_error)
        : h("ul.acl", {}, v.acl.map((a) => h("li", {}, h("code", {}, a.scheme + ":" + a.id), " ", h("span.perms", {}, perms(a.perms)))));
      nodes.push(h("div.cols", {},
        h("div.kids", {}, h("h3", {}, "Children ", h("small", {}, v.children_count)), h("ul", {}, kids)),
        h("div.data", {}, data),
        h("div.meta", {}, h("h3", {}, "Stat"), stat, h("h3", {}, "ACL"), acl)));
    }
    box.replaceChildren(...nodes);
    if (push) history.pushState({ path: v.path }, "", "?path=" + encodeURIComponent(v.path) + "#tree");
  }

  // --- wiring -----------------------------------------------------------
  function render(st) {
    skew = Date.now() - Date.parse(st.server_time);
    renderHealth(st.ensemble);
    renderMembers(st.ensemble);
    renderCharts(st.charts || [], Date.parse(st.server_time));
    renderLocks(st.locks);
    renderCron(st.cron);
    localTimes(document);
    // The open history changes only with the lock's holder.
    if (openLock) {
      const l = st.locks.locks.find((x) => x.name === openLock);
      const holder = l && l.holder ? l.holder.node : "";
      if (holder !== openHolder) { openHolder = holder; showLock(openLock, false); }
    }
  }

  document.addEventListener("click", (ev) => {
    if (ev.button !== 0 || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.altKey) return;
    const a = ev.target.closest("a[data-tree], a[data-lock-link]");
    if (!a) return;
    ev.preventDefault();
    if (a.dataset.tree !== undefined) showNode(a.dataset.tree, true);
    else showLock(a.dataset.lockLink, true);
  });
  $("form.goto").addEventListener("submit", (ev) => { ev.preventDefault(); showNode($("#tree-path").value.trim() || "/", true); });
  window.addEventListener("popstate", () => {
    const q = new URLSearchParams(location.search);
    showNode(q.get("path") || "/", false);
    if (q.get("lock")) showLock(q.get("lock"), false);
  });
  const initial = new URLSearchParams(location.search).get("lock");
  if (initial) openLock = initial;

  const live = $("#live");
  const since = live.dataset.serverTime;
  if (since) skew = Date.now() - Date.parse(since);
  localTimes(document);
  setInterval(tickAges, 1000);

  if (!window.EventSource) {
    // No event streams: reload now and then instead.
    live.textContent = "reloads every 10s";
    setTimeout(() => location.reload(), 10000);
    return;
  }
  const es = new EventSource("/api/events");
  es.addEventListener("state", (ev) => {
    render(JSON.parse(ev.data));
    live.className = "live on";
    live.textContent = "live · " + new Date().toLocaleTimeString();
  });
  es.addEventListener("open", () => { live.className = "live on"; live.textContent = "live"; });
  es.addEventListener("error", () => { live.className = "live off"; live.textContent = "reconnecting…"; });
})();
