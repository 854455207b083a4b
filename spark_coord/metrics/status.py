"""The status page (``/``) and its data (``/status.json``).

The data: the groups this process coordinates, each with its state, generation, members
(the protocol each joined with, its address, whether it is connected, how many partitions
it holds), every partition with its owner, committed offset, log end and lag, the group's
total lag, and that total over the last ``metrics.lag.history.ms`` (sampled every
``metrics.lag.sample.ms``, kept in memory).  Share groups (KIP-932) it coordinates are listed
apart (``share_groups``): state, epoch, members (member id, client id, host, the partitions
assigned to each) and per partition the start offset, log end and lag (records not yet
acknowledged or archived, from the group's znodes), with the total over time.  Long lists are
cut (``MAX_*``; the totals say how many there are).

The page is one HTML document with its script and style inline: nothing is fetched from
anywhere else (its Content-Security-Policy forbids it), so it works on a host without
Internet access.  The first data is embedded in it, so it shows the groups at once; then
it fetches ``status.json`` every ``REFRESH_MS`` and updates the tables and the lag plots
(inline SVG) in place.  Group and member names are set as text, never as markup.
"""

from __future__ import annotations

import html
import json
import time
from typing import Any

from spark_coord.metrics.lag import LagSample

#: Rows of one group shown on the page (the JSON says how many there are in all).
MAX_GROUPS = 500
MAX_MEMBERS = 200
MAX_PARTITIONS = 1000
#: How often the page asks for fresh data.
REFRESH_MS = 2000

#: No external resource may load; scripts and styles only from the page itself.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                           "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
                           "frame-ancestors 'none'")


def status_document(process: str, sample: LagSample | None, history: dict[str, list[tuple[float, int]]],
                    history_ms: int, error: str | None = None) -> dict[str, Any]:
    """The JSON of ``/status.json``."""
    doc: dict[str, Any] = {"process": process, "time": time.time(), "history_seconds": history_ms / 1000,
                           "coordinating": False, "epoch": -1, "groups": [], "groups_total": 0,
                           "share_groups": [], "share_groups_total": 0, "error": error}
    if sample is None:
        return doc
    snap = sample.snapshot
    doc.update(coordinating=snap.coordinating, epoch=snap.epoch, time=snap.taken, groups_total=len(sample.groups))
    for gl in sample.groups[:MAX_GROUPS]:
        g = gl.view
        held: dict[str, int] = {}
        for row in gl.partitions:
            if row.owner is not None:
                held[row.owner] = held.get(row.owner, 0) + 1
        members = sorted(g.members, key=lambda m: m.consumer_id)
        doc["groups"].append({
            "group": g.group_id, "state": g.state, "generation": g.generation, "lag": gl.total,
            "members_total": len(members), "partitions_total": len(gl.partitions),
            "members": [{"id": m.consumer_id, "protocol": m.protocol, "peer": m.peer, "connected": m.connected,
                         "partitions": held.get(m.consumer_id, 0)} for m in members[:MAX_MEMBERS]],
            "partitions": [{"topic": r.topic, "partition": r.partition, "owner": r.owner, "committed": r.committed,
                            "log_end": r.log_end, "lag": r.lag} for r in gl.partitions[:MAX_PARTITIONS]],
            "history": [[round(t, 3), lag] for t, lag in history.get(g.group_id, [])],
        })
    doc["share_groups_total"] = len(sample.share_groups)
    for sl in sample.share_groups[:MAX_GROUPS]:
        g = sl.view
        has_lag = any(r.lag is not None for r in sl.partitions)
        doc["share_groups"].append({
            "group": g.group_id, "state": g.state, "epoch": g.epoch, "lag": sl.total if has_lag else None,
            "members_total": len(g.members), "partitions_total": len(sl.partitions),
            "members": [{"id": m.member_id, "client": m.client_id, "host": m.host,
                         "partitions": [f"{t}-{p}" for t, p in m.partitions]} for m in g.members[:MAX_MEMBERS]],
            "partitions": [{"topic": r.topic, "partition": r.partition, "start": r.start, "log_end": r.log_end,
                            "lag": r.lag} for r in sl.partitions[:MAX_PARTITIONS]],
            "history": [[round(t, 3), lag] for t, lag in history.get(g.group_id, [])],
        })
    return doc


def _embedded_json(doc: dict[str, Any]) -> str:
    """JSON safe inside a <script> element (no '<', '>' or '&' left to end it early)."""
    return json.dumps(doc, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("&", "\\u0026")


def status_page(doc: dict[str, Any]) -> bytes:
    """The HTML page, with ``doc`` embedded as its first data."""
    return (PAGE.replace("%%TITLE%%", html.escape(f"spark-coord {doc['process']}"))
            .replace("%%REFRESH_MS%%", str(REFRESH_MS))
            .replace("%%DATA%%", _embedded_json(doc))).encode()  # last: the data may hold anything


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%%TITLE%%</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
h1 { font-size: 1.4em; margin: 0 0 .2em; }
h2 { font-size: 1.15em; margin: 0; }
#summary { color: #555; margin-bottom: 1em; }
#error { color: #a00; font-weight: bold; }
section.group, section.share-group { background: #fff; border: 1px solid #ddd; border-radius: 6px;
  padding: .8em 1em; margin: 0 0 1.2em; }
.facts { color: #555; margin: .2em 0 .6em; }
.facts b { color: #222; }
table { border-collapse: collapse; margin: .4em 0 .8em; }
th, td { padding: .15em .7em; border-bottom: 1px solid #eee; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.absent td { color: #999; }
.lagging { color: #b35900; font-weight: bold; }
svg.lag-plot { background: #fcfcff; border: 1px solid #e4e4f0; }
svg.lag-plot polyline { fill: none; stroke: #3366cc; stroke-width: 2; }
svg.lag-plot text { font-size: 11px; fill: #666; }
.more { color: #777; font-style: italic; }
</style>
</head>
<body>
<h1>%%TITLE%%</h1>
<div id="summary"></div>
<div id="error"></div>
<div id="groups"></div>
<h1 id="share-title" hidden>Share groups</h1>
<div id="share-groups"></div>
<script id="initial" type="application/json">%%DATA%%</script>
<script>
"use strict";
const REFRESH_MS = %%REFRESH_MS%%;
const PLOT_W = 640, PLOT_H = 140, PAD = 36;
const sections = new Map();

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = String(text);
  return e;
}
function fmt(v) { return v === null || v === undefined ? "\\u2013" : Number(v).toLocaleString("en-US"); }

function table(headers, rows, numeric) {
  const t = el("table");
  const head = el("tr");
  headers.forEach((h, i) => head.appendChild(el("th", numeric[i] ? {class: "num"} : {}, h)));
  t.appendChild(el("thead")).appendChild(head);
  const body = el("tbody");
  for (const r of rows) {
    const tr = el("tr", r.cls ? {class: r.cls} : {});
    r.cells.forEach((c, i) => tr.appendChild(el("td", numeric[i] ? {class: "num"} : {}, c)));
    if (r.attrs) for (const [k, v] of Object.entries(r.attrs)) tr.setAttribute(k, v);
    body.appendChild(tr);
  }
  t.appendChild(body);
  return t;
}

function ago(seconds) {
  return seconds < 120 ? `-${Math.round(seconds)} s` : `-${Math.round(seconds / 60)} min`;
}

function plot(g, now, span) {
  const s = svg("svg", {class: "lag-plot", width: PLOT_W, height: PLOT_H, viewBox: `0 0 ${PLOT_W} ${PLOT_H}`,
                        "data-group": g.group, "data-points": g.history.length, role: "img",
                        "aria-label": `total lag of ${g.group} over the last ${ago(span).slice(1)}`});
  const max = Math.max(1, ...g.history.map(p => p[1]));
  const x = t => PAD + (PLOT_W - PAD - 8) * Math.min(1, Math.max(0, 1 - (now - t) / span));
  const y = v => PLOT_H - 18 - (PLOT_H - 30) * (v / max);
  s.appendChild(svg("line", {x1: PAD, y1: y(0), x2: PLOT_W - 8, y2: y(0), stroke: "#ccc"}));
  s.appendChild(svg("text", {x: 2, y: y(max) + 4}, fmt(max)));
  s.appendChild(svg("text", {x: 2, y: y(0) + 4}, "0"));
  s.appendChild(svg("text", {x: PAD, y: PLOT_H - 3}, ago(span)));
  s.appendChild(svg("text", {x: PLOT_W - 40, y: PLOT_H - 3}, "now"));
  const points = g.history.map(p => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
  s.appendChild(svg("polyline", {points: points}));
  return s;
}

function render(doc) {
  document.getElementById("summary").textContent =
    (doc.coordinating ? `coordinator (epoch ${doc.epoch}), ${doc.groups_total} group(s)` +
                        (doc.share_groups_total ? `, ${doc.share_groups_total} share group(s)` : "")
                      : "this process is not the coordinator now: the coordinator's endpoint shows the groups") +
    ` \\u00b7 updated ${new Date(doc.time * 1000).toLocaleTimeString()}`;
  document.getElementById("error").textContent = doc.error || "";
  const container = document.getElementById("groups");
  const seen = new Set();
  // the plots span the history kept so far (at least a minute), up to what the process keeps
  const oldest = Math.min(doc.time, ...[...doc.groups, ...(doc.share_groups || [])]
    .flatMap(g => g.history.length ? [g.history[0][0]] : []));
  const span = Math.min(doc.history_seconds, Math.max(60, doc.time - oldest));
  for (const g of doc.groups) {
    seen.add(g.group);
    let sec = sections.get(g.group);
    if (!sec) {
      sec = el("section", {class: "group", "data-group": g.group});
      sections.set(g.group, sec);
    }
    container.appendChild(sec);  // keeps the order of the document
    sec.replaceChildren();
    sec.appendChild(el("h2", {}, g.group));
    const facts = el("div", {class: "facts"});
    facts.append("state ", el("b", {}, g.state), " \\u00b7 generation ", el("b", {}, g.generation),
                 " \\u00b7 members ", el("b", {}, g.members_total), " \\u00b7 total lag ",
                 el("b", {class: g.lag > 0 ? "lagging group-lag" : "group-lag"}, fmt(g.lag)));
    sec.appendChild(facts);
    sec.appendChild(plot(g, doc.time, span));
    sec.appendChild(table(["member", "protocol", "address", "partitions"],
      g.members.map(m => ({cls: m.connected ? "member" : "member absent",
                           cells: [m.id, m.protocol, m.connected ? m.peer : "(absent)", m.partitions]})),
      [false, false, false, true]));
    if (g.members_total > g.members.length)
      sec.appendChild(el("div", {class: "more"}, `\\u2026 and ${g.members_total - g.members.length} more members`));
    sec.appendChild(table(["topic", "partition", "owner", "committed", "log end", "lag"],
      g.partitions.map(p => ({cls: p.lag > 0 ? "partition lagging" : "partition",
                              attrs: {"data-topic": p.topic, "data-partition": p.partition},
                              cells: [p.topic, p.partition, p.owner || "\\u2013", fmt(p.committed), fmt(p.log_end),
                                      fmt(p.lag)]})),
      [false, true, false, true, true, true]));
    if (g.partitions_total > g.partitions.length)
      sec.appendChild(el("div", {class: "more"},
                         `\\u2026 and ${g.partitions_total - g.partitions.length} more partitions`));
  }
  for (const [name, sec] of sections) {
    if (!seen.has(name)) { sec.remove(); sections.delete(name); }
  }
  renderShare(doc, span);
}

const shareSections = new Map();
function renderShare(doc, span) {
  const groups = doc.share_groups || [];
  document.getElementById("share-title").hidden = groups.length === 0;
  const container = document.getElementById("share-groups");
  const seen = new Set();
  for (const g of groups) {
    seen.add(g.group);
    let sec = shareSections.get(g.group);
    if (!sec) {
      sec = el("section", {class: "share-group", "data-group": g.group});
      shareSections.set(g.group, sec);
    }
    container.appendChild(sec);
    sec.replaceChildren();
    sec.appendChild(el("h2", {}, g.group));
    const facts = el("div", {class: "facts"});
    facts.append("share group \u00b7 state ", el("b", {}, g.state), " \u00b7 epoch ", el("b", {}, g.epoch),
                 " \u00b7 members ", el("b", {}, g.members_total), " \u00b7 total lag ",
                 el("b", {class: g.lag > 0 ? "lagging group-lag" : "group-lag"}, fmt(g.lag)));
    sec.appendChild(facts);
    sec.appendChild(plot(g, doc.time, span));
    sec.appendChild(table(["member", "client", "host", "partitions"],
      g.members.map(m => ({cls: "member", cells: [m.id, m.client, m.host, m.partitions.join(", ") || "\u2013"]})),
      [false, false, false, false]));
    if (g.members_total > g.members.length)
      sec.appendChild(el("div", {class: "more"}, `\u2026 and ${g.members_total - g.members.length} more members`));
    sec.appendChild(table(["topic", "partition", "start offset", "log end", "lag"],
      g.partitions.map(p => ({cls: p.lag > 0 ? "partition lagging" : "partition",
                              attrs: {"data-topic": p.topic, "data-partition": p.partition},
                              cells: [p.topic, p.partition, fmt(p.start), fmt(p.log_end), fmt(p.lag)]})),
      [false, true, true, true, true]));
    if (g.partitions_total > g.partitions.length)
      sec.appendChild(el("div", {class: "more"},
                         `\u2026 and ${g.partitions_total - g.partitions.length} more partitions`));
  }
  for (const [name, sec] of shareSections) {
    if (!seen.has(name)) { sec.remove(); shareSections.delete(name); }
  }
}

async function refresh() {
  try {
    const r = await fetch("status.json", {cache: "no-store"});
    render(await r.json());
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  } catch (e) {
    document.getElementById("error").textContent = `refresh failed: ${e}`;
  }
}

render(JSON.parse(document.getElementById("initial").textContent));
setInterval(refresh, REFRESH_MS);
</script>
</body>
</html>
"""
