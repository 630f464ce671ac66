"""The cluster as one picture: GET / (a page for a browser) and GET /cluster (its data).

GET /cluster  JSON: every member's status as this node sees it (its own, and
              each peer's /status asked over HTTP with a short timeout; the
              members are the serving leader's, not the file's: roster.py,
              and a file node that is not one is listed as "not a member"), who
              leads, each node's lag in entries (and, from the leader, in
              seconds), and every tube's depth and counters from this node's
              replicated state (followers hold the same). `haqueue top` reads
              it too.
GET /         The status page: one self-contained HTML document (inline CSS
              and script, no external assets, so it works offline and behind
              any firewall) that polls /cluster every second and redraws:
              the leader, the nodes' table, and the tubes with their depth,
              put rate and sparklines of ready depth and puts per second.

Any node serves both, followers too: open the page on a follower and it
keeps updating through a failover of the leader.

Operations (operate.py has the routes and rules): a tube's name opens its
panel: its counters, the next ready, delayed and buried job with a preview of
the body (always put into the page as text, never as markup: a body holding
HTML or script shows as those characters), and buttons to kick N, pause,
resume, put a job, and kick or delete one job; a job can be looked up by id.
Every change is a POST to /op carrying this browser session's CSRF token
(from GET /session) and the admin token when one is set; the page answers
with the server's reply, and the leader records it as an event.
"""

from __future__ import annotations

import asyncio
import json

from haqueue.roster import FileNode, directory, leader_view, roster
from haqueue.server.batcher import wall_ms
from haqueue.server.metrics import tube_rows

PEER_TIMEOUT = 0.5
# Columns of metrics.tube_rows the view shows, by name.
TUBE_COLUMNS = {"urgent": 0, "ready": 1, "reserved": 2, "delayed": 3, "buried": 4, "waiting": 7,
                "pause_time_left": 8, "total_jobs": 9, "deletes": 10}


async def fetch_json(host: str, port: int, path: str, timeout: float = PEER_TIMEOUT,
                     token: str | None = None) -> dict:
    """GET a peer's admin endpoint without blocking the event loop; raises OSError/ValueError."""
    authorization = f"Authorization: Bearer {token}\r\n" if token else ""

    async def get() -> bytes:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n{authorization}\r\n".encode())
            return await reader.read()
        finally:
            writer.close()

    try:
        raw = await asyncio.wait_for(get(), timeout)
    except asyncio.TimeoutError:
        raise OSError(f"{host}:{port} did not answer within {timeout:g} s") from None
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0]
    if status_line.split()[1:2] != [b"200"]:
        raise OSError(f"{host}:{port}{path}: {status_line!r}")
    return json.loads(body)


async def cluster_view(server) -> dict:
    """The nodes as roster.py lists them (the serving leader's members, named through
    this node's file and the additions' entries), each with its /status."""
    options = server.options
    me = options.node_id or options.name
    file_nodes = [FileNode(*member) for member in options.members] or [FileNode(me, "", 0, options.raft_address)]
    mine = options.raft_address if options.members else file_nodes[0].raft
    own = server.status()
    answers: dict = {mine: own}

    async def ask(entry) -> None:
        try:
            answers[entry.raft] = await fetch_json(entry.host, entry.admin_port, "/status", token=options.admin_token)
        except (OSError, ValueError):
            answers[entry.raft] = None

    async def ask_all(entries) -> None:
        await asyncio.gather(*(ask(e) for e in entries if e.raft not in answers and e.admin_port))

    # Every node this node can name first; then the members only the leader could name.
    await ask_all(directory(file_nodes, own.get("member_info") or {}).values())
    leader = leader_view(answers.values())
    members, info = leader if leader is not None else (own.get("members"), {})
    lines = roster(file_nodes, members, own.get("member_info") or {}, info)
    await ask_all(lines)
    nodes = []
    for line in lines:
        row = {"node": line.node, "raft": line.raft, "self": line.raft == mine, "membership": line.membership,
               "in_file": line.in_file, "host": line.host, "admin_port": line.admin_port}
        answer = answers.get(line.raft)
        if answer is not None:
            row.update(reachable=True, **answer)
        else:
            row["reachable"] = False
        nodes.append(row)
    by_raft = {row["raft"]: row["node"] for row in nodes}
    leader_commit = max((row.get("commit_index") or 0) for row in nodes)
    serving = [row for row in nodes if row.get("reachable") and row.get("serving")]
    for row in nodes:
        if row.get("reachable"):
            row["lag_entries"] = max(0, leader_commit - (row.get("applied_index") or 0))
            row["leader_id"] = by_raft.get(row.get("leader"), row.get("leader"))
    for leader_row in serving:
        for raft, behind in (leader_row.get("follower_lag") or {}).items():
            follower = next((r for r in nodes if r["raft"] == raft), None)
            if follower is not None:
                follower["lag_seconds"] = behind["seconds"]
    names, columns = tube_rows(server)
    tubes = [{"name": name, **{key: columns[slot][i] for key, slot in TUBE_COLUMNS.items()}}
             for i, name in enumerate(names)]
    return {
        "cluster": options.name.split("/")[0],
        "node": me,
        "time_ms": wall_ms(),
        "leader": serving[0]["node"] if len(serving) == 1 else None,
        "serving": [row["node"] for row in serving],
        "nodes": nodes,
        "tubes": tubes,
    }


PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>haqueue</title>
<style>
  :root { color-scheme: light dark; --ok: #1a7f37; --bad: #cf222e; --dim: #6e7781; --line: #d0d7de; }
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; }
  h1 { font-size: 1.3rem; margin: 0 0 .2rem; }
  .sub { color: var(--dim); margin-bottom: 1rem; }
  .banner { font-size: 1.1rem; margin: .8rem 0; }
  .banner b { padding: .1rem .5rem; border-radius: .3rem; background: var(--ok); color: white; }
  .banner.none b { background: var(--bad); }
  table { border-collapse: collapse; margin-bottom: 1.5rem; min-width: 40rem; }
  th, td { text-align: right; padding: .25rem .7rem; border-bottom: 1px solid var(--line); }
  th:first-child, td:first-child { text-align: left; }
  th { font-weight: 600; color: var(--dim); }
  tr.leader td:first-child::after { content: " \\2605"; color: var(--ok); }
  tr.down td { color: var(--bad); }
  td.spark { padding: 0 .5rem; }
  svg polyline { fill: none; stroke-width: 1.5; }
  .ready polyline { stroke: #0969da; } .rate polyline { stroke: #8250df; }
  #error { color: var(--bad); }
  button.open-tube { font: inherit; border: 0; background: none; padding: 0; color: #0969da;
    cursor: pointer; text-decoration: underline; }
  #ops { border-top: 1px solid var(--line); padding-top: .5rem; }
  #ops form, #ops .row { margin: .4rem 0; }
  #ops input[type=number] { width: 6rem; }
  .peeks { display: flex; gap: 1rem; flex-wrap: wrap; }
  .peek { border: 1px solid var(--line); border-radius: .3rem; padding: .5rem; min-width: 16rem;
    max-width: 28rem; flex: 1; }
  .peek h3 { font-size: 1rem; margin: 0 0 .3rem; }
  .peek pre.body { white-space: pre-wrap; word-break: break-all; max-height: 12rem; overflow: auto;
    background: rgba(127,127,127,.1); padding: .3rem; margin: .3rem 0; }
  .peek .meta { color: var(--dim); }
  #op-result.bad { color: var(--bad); } #op-result.good { color: var(--ok); }
</style>
</head>
<body>
<h1>haqueue <span id="cluster"></span></h1>
<div class="sub">seen from node <span id="self"></span>, updated <span id="updated">never</span>
  <span id="error"></span></div>
<form id="login" hidden>this node asks for its admin token:
  <input id="token" type="password" autocomplete="off"> <button>show</button></form>
<div class="banner" id="banner">leader: <b id="leader" data-leader="">?</b></div>
<h2>Nodes</h2>
<table id="nodes">
  <thead><tr><th>node</th><th>member</th><th>reachable</th><th>role</th><th>serving</th><th>term</th><th>commit</th>
    <th>applied</th><th>lag (entries)</th><th>lag (s)</th></tr></thead>
  <tbody></tbody>
</table>
<h2>Tubes</h2>
<table id="tubes">
  <thead><tr><th>tube</th><th>ready</th><th>reserved</th><th>delayed</th><th>buried</th><th>waiting</th>
    <th>puts/s</th><th>ready, last 2 min</th><th>puts/s, last 2 min</th></tr></thead>
  <tbody></tbody>
</table>
<section id="ops" hidden>
<h2>Tube <span id="ops-tube"></span> <button id="ops-close" type="button">close</button></h2>
<div class="row" id="ops-counts"></div>
<form id="kick-form">kick up to <input id="kick-count" type="number" min="0" value="1"> buried
  (or delayed) jobs <button>kick</button></form>
<form id="pause-form">pause for <input id="pause-seconds" type="number" min="0" value="60"> s
  <button>pause</button> <button id="resume" type="button">resume</button></form>
<div class="peeks">
  <div class="peek" data-kind="ready" data-job=""><h3>next ready</h3><div class="job"></div></div>
  <div class="peek" data-kind="delayed" data-job=""><h3>next delayed</h3><div class="job"></div></div>
  <div class="peek" data-kind="buried" data-job=""><h3>next buried</h3><div class="job"></div></div>
</div>
<form id="put-form">put a job: <textarea id="put-body" rows="2" cols="40"></textarea>
  pri <input id="put-pri" type="number" min="0" value="0"> delay <input id="put-delay" type="number"
  min="0" value="0"> ttr <input id="put-ttr" type="number" min="1" value="60"> <button>put</button></form>
</section>
<form id="job-form">job by id: <input id="job-id" type="number" min="1"> <button>show</button></form>
<div class="peek" id="job-view" data-kind="job" data-job="" hidden><h3>job</h3><div class="job"></div></div>
<p id="op-result" data-status=""></p>
<script>
"use strict";
const HISTORY = 120, PERIOD_MS = 1000;
const history = new Map();  // tube -> {ready: [], rate: [], total: n, at: ms}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function sparkline(values, cls) {
  const w = 120, h = 22, max = Math.max(1, ...values);
  // Newest on the right; a short history is drawn wider until 20 samples fill it.
  const step = w / (Math.min(HISTORY, Math.max(20, values.length)) - 1);
  const points = values.map((v, i) => `${(w - (values.length - 1 - i) * step).toFixed(1)},` +
                                      `${(h - 1 - (v / max) * (h - 2)).toFixed(1)}`).join(" ");
  return `<svg class="${cls}" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">` +
         `<line x1="0" y1="${h - 1}" x2="${w}" y2="${h - 1}" stroke="currentColor" stroke-opacity=".15"/>` +
         `<polyline points="${points}"/></svg>`;
}

function remember(tube, now) {
  let seen = history.get(tube.name);
  if (!seen) { seen = {ready: [], rate: [], total: tube.total_jobs, at: now}; history.set(tube.name, seen); }
  const seconds = (now - seen.at) / 1000;
  const rate = seconds > 0 ? Math.max(0, tube.total_jobs - seen.total) / seconds : 0;
  seen.total = tube.total_jobs; seen.at = now;
  seen.ready.push(tube.ready); seen.rate.push(rate);
  if (seen.ready.length > HISTORY) { seen.ready.shift(); seen.rate.shift(); }
  return rate;
}

function show(view) {
  document.getElementById("cluster").textContent = view.cluster;
  document.getElementById("self").textContent = view.node;
  document.getElementById("updated").textContent = new Date(view.time_ms).toLocaleTimeString();
  document.getElementById("error").textContent = "";
  const leader = document.getElementById("leader");
  leader.textContent = view.leader || (view.serving.length ? "several: " + view.serving.join(", ") : "none");
  leader.dataset.leader = view.leader || "";
  document.getElementById("banner").className = view.leader ? "banner" : "banner none";

  const nodes = document.querySelector("#nodes tbody");
  nodes.replaceChildren();
  for (const n of view.nodes) {
    const row = nodes.insertRow();
    row.dataset.node = n.node;
    row.dataset.role = n.reachable ? n.role : "unreachable";
    row.dataset.membership = n.membership;
    row.className = !n.reachable ? "down" : (n.node === view.leader ? "leader" : "");
    cell(row, n.node, "node");
    cell(row, n.membership === "not a member" ? "not a member" : "yes", "membership");
    cell(row, n.reachable ? "yes" : "no", "reachable");
    cell(row, n.reachable ? n.role : "-", "role");
    cell(row, n.reachable ? (n.serving ? "yes" : "no") : "-", "serving");
    for (const key of ["term", "commit_index", "applied_index", "lag_entries"])
      cell(row, n.reachable ? String(n[key] ?? "-") : "-", key);
    cell(row, n.lag_seconds === undefined ? "-" : n.lag_seconds.toFixed(3), "lag_seconds");
  }

  const tubes = document.querySelector("#tubes tbody");
  tubes.replaceChildren();
  const now = view.time_ms;
  for (const t of view.tubes) {
    const rate = remember(t, now);
    const row = tubes.insertRow();
    row.dataset.tube = t.name;
    const open = document.createElement("button");
    open.className = "open-tube"; open.type = "button"; open.dataset.tube = t.name; open.textContent = t.name;
    cell(row, "", "name").append(open);
    for (const key of ["ready", "reserved", "delayed", "buried", "waiting"]) cell(row, String(t[key]), key);
    cell(row, rate.toFixed(1), "rate");
    const seen = history.get(t.name);
    cell(row, "", "spark").innerHTML = sparkline(seen.ready, "ready");
    cell(row, "", "spark").innerHTML = sparkline(seen.rate, "rate");
  }
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
}

// With [cluster] admin_token set, /cluster wants "Authorization: Bearer TOKEN":
// asked for once, kept for this tab only (sessionStorage), sent on every poll.
const login = document.getElementById("login");
login.addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("haqueue-token", document.getElementById("token").value);
  login.hidden = true;
});

function authorization() {
  const token = sessionStorage.getItem("haqueue-token");
  return token ? {"Authorization": "Bearer " + token} : {};
}

// ---- operations (server/operate.py): reads by GET, changes by POST /op with the CSRF token
let openTube = null, csrf = null;

function element(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;  // text, never markup
  if (cls) node.className = cls;
  return node;
}

function showJob(box, job) {
  const slot = box.querySelector(".job");
  box.dataset.job = job ? String(job.id) : "";
  if (!job) { slot.replaceChildren(element("div", "none", "meta")); return; }
  const p = job.preview;
  const meta = `job ${job.id} in ${job.tube}, pri ${job.pri}, ${p.size} bytes` +
               (job.stats ? `, ${job.stats.state}` : "") +
               (p.kind === "binary" ? ", binary (hex)" : "") + (p.truncated ? ", shown in part" : "");
  const body = element("pre", p.text, "body");
  body.dataset.kind = p.kind;
  const kick = element("button", "kick", "kick-job"), del = element("button", "delete", "delete-job");
  kick.type = del.type = "button";
  kick.addEventListener("click", () => operate({op: "kick-job", job: job.id}));
  del.addEventListener("click", () => {
    if (confirm(`Delete job ${job.id}?`)) operate({op: "delete", job: job.id});
  });
  // Only a buried or delayed job can be kicked.
  const state = job.stats ? job.stats.state : box.dataset.kind;
  slot.replaceChildren(element("div", meta, "meta"), body,
                       ...(state === "buried" || state === "delayed" ? [kick] : []), del);
}

async function getJson(path) {
  const answer = await fetch(path, {cache: "no-store", headers: authorization()});
  return [answer.status, await answer.json()];
}

async function refreshTube() {
  if (!openTube) return;
  const [status, view] = await getJson("/tube/" + encodeURIComponent(openTube));
  const panel = document.getElementById("ops");
  panel.hidden = false;
  document.getElementById("ops-tube").textContent = openTube;
  if (status !== 200) {
    document.getElementById("ops-counts").textContent = view.error;
    for (const box of panel.querySelectorAll(".peek")) showJob(box, null);
    return;
  }
  const s = view.stats;
  document.getElementById("ops-counts").textContent =
    `ready ${s["current-jobs-ready"]}, reserved ${s["current-jobs-reserved"]}, ` +
    `delayed ${s["current-jobs-delayed"]}, buried ${s["current-jobs-buried"]}` +
    (s["pause-time-left"] > 0 ? `; paused, ${s["pause-time-left"]} s left` : "; not paused");
  panel.dataset.paused = String(s["pause-time-left"] > 0);
  for (const kind of ["ready", "delayed", "buried"])
    showJob(panel.querySelector(`.peek[data-kind=${kind}]`), view.peek[kind]);
  document.body.dataset.tubeViews = String(Number(document.body.dataset.tubeViews || 0) + 1);
}

async function operate(request) {
  const result = document.getElementById("op-result");
  try {
    let answer = null, reply = null;
    if (!csrf) {
      const [status, session] = await getJson("/session");
      if (status === 200) csrf = session.csrf;
      else [answer, reply] = [{status}, session];  // no token: refused as the POST would be
    }
    if (!answer) {
      answer = await fetch("/op", {method: "POST", cache: "no-store",
        headers: {...authorization(), "Content-Type": "application/json"},
        body: JSON.stringify({...request, csrf})});
      reply = await answer.json();
    }
    if (answer.status === 403) csrf = null;  // a new session on the next try
    result.textContent = reply.ok ? `${request.op}: ${reply.reply}` :
      reply.error + (reply.leader_page ? ` (${reply.leader_page})` : "");
    result.className = reply.ok ? "good" : "bad";
    result.dataset.status = String(answer.status);
  } catch (err) {
    result.textContent = `${request.op}: ${err.message}`;
    result.className = "bad";
    result.dataset.status = "error";
  }
  result.dataset.done = String(Number(result.dataset.done || 0) + 1);
  await refreshTube();
  const shown = document.getElementById("job-view");
  if (!shown.hidden && shown.dataset.job) await lookUp(shown.dataset.job);
}

async function lookUp(id) {
  const box = document.getElementById("job-view");
  const [status, job] = await getJson("/job/" + encodeURIComponent(id));
  box.hidden = false;
  if (status === 200) showJob(box, job);
  else { showJob(box, null); box.querySelector(".job").replaceChildren(element("div", job.error, "meta")); }
}

document.querySelector("#tubes tbody").addEventListener("click", (event) => {
  const button = event.target.closest("button.open-tube");
  if (button) { openTube = button.dataset.tube; refreshTube(); }
});
document.getElementById("ops-close").addEventListener("click", () => {
  openTube = null; document.getElementById("ops").hidden = true;
});
const number = (id) => Number(document.getElementById(id).value);
document.getElementById("kick-form").addEventListener("submit", (event) => {
  event.preventDefault(); operate({op: "kick", tube: openTube, count: number("kick-count")});
});
document.getElementById("pause-form").addEventListener("submit", (event) => {
  event.preventDefault(); operate({op: "pause", tube: openTube, seconds: number("pause-seconds")});
});
document.getElementById("resume").addEventListener("click", () => operate({op: "resume", tube: openTube}));
document.getElementById("put-form").addEventListener("submit", (event) => {
  event.preventDefault();
  operate({op: "put", tube: openTube, body: document.getElementById("put-body").value,
           pri: number("put-pri"), delay: number("put-delay"), ttr: number("put-ttr")});
});
document.getElementById("job-form").addEventListener("submit", (event) => {
  event.preventDefault(); lookUp(document.getElementById("job-id").value);
});

async function poll() {
  try {
    const answer = await fetch("/cluster", {cache: "no-store", headers: authorization()});
    login.hidden = answer.status !== 401;
    if (!answer.ok) throw new Error("HTTP " + answer.status);
    show(await answer.json());
    if (openTube) await refreshTube();
  } catch (err) {
    document.getElementById("error").textContent = "(this node does not answer: " + err.message + ")";
  } finally {
    setTimeout(poll, PERIOD_MS);
  }
}
poll();
</script>
</body>
</html>
"""


def page() -> bytes:
    return PAGE.encode()
