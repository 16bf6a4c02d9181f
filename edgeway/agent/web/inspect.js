// The Edgeway agent's web inspector: the captured HTTP requests, live (server-sent events
// from /inspect/http/events), their headers and bodies, and replays (also with changes)
// through the local API (/api/requests/http). No library, nothing loaded from elsewhere.
"use strict";

const $ = (id) => document.getElementById(id);
const rows = new Map(); // id -> <tr>
let selected = null; // the exchange shown
let current = null; // its full capture

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  Object.entries(attrs || {}).forEach(([k, v]) => node.setAttribute(k, v));
  children.forEach((c) => node.append(c));
  return node;
}

function ms(ns) {
  if (!ns) return "";
  const m = ns / 1e6;
  return m < 10 ? `${m.toFixed(2)} ms` : m < 1000 ? `${m.toFixed(0)} ms` : `${(m / 1000).toFixed(2)} s`;
}

function upsert(s) {
  const tunnel = $("tunnel").value;
  if (tunnel && s.tunnel_name !== tunnel) return;
  let tr = rows.get(s.id);
  const status = s.status_code == null ? "…" : String(s.status_code);
  const cells = [
    el("td", { class: "method" }, s.method),
    el("td", { class: "uri", title: s.uri }, s.uri),
    el("td", { class: `status s${status[0]}` }, status),
    el("td", { class: "duration" }, ms(s.duration)),
  ];
  if (!tr) {
    tr = el("tr", { "data-id": s.id });
    tr.addEventListener("click", () => select(s.id));
    rows.set(s.id, tr);
    $("requests").tBodies[0].prepend(tr);
  }
  tr.replaceChildren(...cells);
  tr.classList.toggle("selected", s.id === selected);
  $("empty").hidden = rows.size > 0;
  addTunnel(s.tunnel_name);
}

function addTunnel(name) {
  const select = $("tunnel");
  if ([...select.options].some((o) => o.value === name)) return;
  select.append(el("option", { value: name }, name));
}

function summary(ex) {
  return { id: ex.id, tunnel_name: ex.tunnel_name, duration: ex.duration,
           method: ex.request.method, uri: ex.request.uri,
           status_code: ex.response ? ex.response.status_code : null };
}

async function load() {
  const tunnel = $("tunnel").value;
  const query = tunnel ? `&tunnel_name=${encodeURIComponent(tunnel)}` : "";
  const r = await fetch(`/api/requests/http?limit=200${query}`);
  if (!r.ok) { notice((await r.json()).msg, true); return; }
  rows.clear();
  $("requests").tBodies[0].replaceChildren();
  (await r.json()).requests.reverse().forEach((ex) => upsert(summary(ex)));
}

function bytesOf(b64) {
  const text = atob(b64);
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return out;
}

function find(bytes, a, b, c, d, from) {
  for (let i = from || 0; i + 3 < bytes.length; i++) {
    if (bytes[i] === a && bytes[i + 1] === b && bytes[i + 2] === c && bytes[i + 3] === d) return i;
  }
  return -1;
}

function header(headers, name) {
  const key = Object.keys(headers || {}).find((k) => k.toLowerCase() === name);
  return key ? headers[key].join(",").toLowerCase() : "";
}

function dechunk(bytes) {
  const parts = [];
  let pos = 0;
  const decoder = new TextDecoder("latin1");
  while (pos < bytes.length) {
    let end = pos;
    while (end + 1 < bytes.length && !(bytes[end] === 13 && bytes[end + 1] === 10)) end++;
    const size = parseInt(decoder.decode(bytes.subarray(pos, end)).split(";")[0], 16);
    if (!size) break;
    parts.push(bytes.subarray(end + 2, end + 2 + size));
    pos = end + 2 + size + 2;
  }
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  parts.forEach((p) => { out.set(p, at); at += p.length; });
  return out;
}

async function bodyOf(part) {
  const raw = bytesOf(part.raw);
  const split = find(raw, 13, 10, 13, 10);
  let body = split < 0 ? new Uint8Array() : raw.subarray(split + 4);
  if (header(part.headers, "transfer-encoding").endsWith("chunked")) body = dechunk(body);
  const coding = header(part.headers, "content-encoding");
  if (body.length && (coding === "gzip" || coding === "deflate") && !part.truncated &&
      window.DecompressionStream) {
    try {
      const stream = new Blob([body]).stream().pipeThrough(new DecompressionStream(coding));
      body = new Uint8Array(await new Response(stream).arrayBuffer());
    } catch (e) { /* shown as it came */ }
  }
  return body;
}

function hex(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const row = bytes.subarray(i, i + 16);
    const hexes = [...row].map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const text = [...row].map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(`${i.toString(16).padStart(8, "0")}  ${hexes.padEnd(47)}  ${text}`);
  }
  return lines.join("\n");
}

function render(bytes, headers, truncated) {
  if (!bytes.length) return "";
  const type = header(headers, "content-type");
  let text = null;
  try { text = new TextDecoder("utf-8", { fatal: true }).decode(bytes); } catch (e) { text = null; }
  const note = truncated ? "\n\n(truncated: only the first 64 KiB were captured)" : "";
  if (text !== null && type.includes("json")) {
    try { return JSON.stringify(JSON.parse(text), null, 2) + note; } catch (e) { /* as text */ }
  }
  if (text !== null && !/[\x00-\x08\x0e-\x1f]/.test(text)) return text + note;
  return hex(bytes) + note;
}

function headerRows(table, headers) {
  table.replaceChildren(...Object.entries(headers || {}).flatMap(([name, values]) =>
    values.map((v) => el("tr", {}, el("th", {}, name), el("td", {}, v)))));
}

async function select(id) {
  if (id !== selected) closeEditor(); // the editor belongs to the request it was opened on
  selected = id;
  rows.forEach((tr, key) => tr.classList.toggle("selected", key === id));
  const r = await fetch(`/api/requests/http/${id}`);
  if (!r.ok) { notice((await r.json()).msg, true); return; }
  const ex = (current = await r.json());
  $("detail").hidden = false;
  $("title").textContent = `${ex.request.method} ${ex.request.uri}`;
  $("req-line").textContent = `${ex.request.method} ${ex.request.uri} ${ex.request.proto} · ` +
    `${ex.tunnel_name} · from ${ex.remote_addr}`;
  headerRows($("req-headers"), ex.request.headers);
  $("req-body").textContent = render(await bodyOf(ex.request), ex.request.headers,
                                     ex.request.truncated);
  const res = ex.response;
  $("res-line").textContent = res ? `${res.proto} ${res.status} · ${ms(ex.duration)}` : "(waiting)";
  headerRows($("res-headers"), res ? res.headers : {});
  $("res-body").textContent = res ? render(await bodyOf(res), res.headers, res.truncated) : "";
}

function notice(text, error) {
  $("notice").textContent = text;
  $("notice").classList.toggle("error", !!error);
}

async function replay(changes) {
  const r = await fetch("/api/requests/http", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ id: current.id, ...changes }),
  });
  if (r.status === 204) { notice("Replayed: the new exchange is at the top of the list."); return true; }
  const err = await r.json();
  notice(`${err.msg}: ${err.details.err}`, true);
  return false;
}

let opened = null; // the editor's fields as filled from the capture

function fields() {
  return { method: $("e-method").value, uri: $("e-uri").value, headers: $("e-headers").value,
           body: $("e-body").value };
}

async function openEditor() {
  const req = current.request;
  $("e-method").value = req.method;
  $("e-uri").value = req.uri;
  $("e-headers").value = Object.entries(req.headers).flatMap(([n, vs]) =>
    ["content-length", "transfer-encoding"].includes(n.toLowerCase()) ? [] : vs.map((v) => `${n}: ${v}`)).join("\n");
  $("e-body").value = new TextDecoder().decode(await bodyOf(req));
  opened = fields();
  $("editor").hidden = false;
  $("e-uri").focus();
}

function closeEditor() { // edits are discarded: the next open starts from the capture again
  $("editor").hidden = true;
  $("editor").reset();
  opened = null;
}

function parseHeaders(text) {
  const headers = {};
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const at = line.indexOf(":");
    if (at < 1) throw new Error(`"${line}" is not "Name: value"`);
    const name = line.slice(0, at).trim();
    (headers[name] = headers[name] || []).push(line.slice(at + 1).trim());
  }
  return headers;
}

// Only what was changed is sent: an untouched form replays the request as captured (its
// bytes, so a binary or chunked body goes as it came), a new path keeps the captured body.
function edits() {
  const now = fields();
  const changes = {};
  if (now.method.trim() !== opened.method) changes.method = now.method.trim();
  if (now.uri.trim() !== opened.uri) changes.uri = now.uri.trim();
  if (now.headers !== opened.headers) changes.headers = parseHeaders(now.headers);
  if (now.body !== opened.body) changes.body = now.body;
  return changes;
}

function follow() {
  const events = new EventSource("/inspect/http/events");
  events.addEventListener("open", () => { $("live").className = "on"; $("live").textContent = "live"; });
  events.addEventListener("error", () => { $("live").className = "off"; $("live").textContent = "reconnecting…"; });
  events.addEventListener("request", (e) => {
    const s = JSON.parse(e.data);
    upsert(s);
    if (s.id === selected) select(s.id);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  $("replay").addEventListener("click", () => replay({}));
  $("edit").addEventListener("click", openEditor);
  $("cancel").addEventListener("click", closeEditor);
  $("editor").addEventListener("submit", async (e) => {
    e.preventDefault();
    let changes;
    try { changes = edits(); } catch (err) { notice(err.message, true); return; }
    if (await replay(changes)) closeEditor();
  });
  $("clear").addEventListener("click", async () => {
    await fetch("/api/requests/http", { method: "DELETE" });
    selected = null;
    closeEditor();
    $("detail").hidden = true;
    load();
  });
  $("tunnel").addEventListener("change", load);
  fetch("/api/tunnels").then((r) => r.json()).then((d) => d.tunnels.forEach((t) => addTunnel(t.name)));
  load().then(follow);
});
