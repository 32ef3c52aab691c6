"""The report page's own HTML, CSS and JavaScript (no library, no network): html.py fills in the
profile as JSON. Views: flame graph (icicle), kernels table, roofline, source heat.

Hash options (for links and tests): #view=flame|kernels|roofline|source|findings, #zoom=NODE,
#sort=COLUMN:asc|desc, #search=TEXT.
"""

TEMPLATE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>__TITLE__</title>
<style>
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;background:#fafbfc}
header{padding:10px 16px;background:#1d2330;color:#fff;display:flex;gap:16px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:16px;margin:0}header .sub{opacity:.75}
nav{display:flex;gap:4px;padding:8px 16px;border-bottom:1px solid #dde1e6;background:#fff}
nav button{border:1px solid #c9ced6;background:#fff;padding:4px 12px;border-radius:4px;cursor:pointer}
nav button.on{background:#1d2330;color:#fff;border-color:#1d2330}
nav input{margin-left:auto;padding:4px 8px;border:1px solid #c9ced6;border-radius:4px;width:260px}
section{display:none;padding:12px 16px}section.on{display:block}
#flame svg{width:100%;display:block}#flame rect{stroke:#fff;stroke-width:.5;cursor:pointer}
#flame rect.match{fill:#e040fb!important}#flame text{font-size:11px;pointer-events:none;fill:#111}
#crumbs{margin-bottom:6px}#crumbs a{cursor:pointer;color:#2563eb}
#tip{position:fixed;display:none;background:#fff;border:1px solid #c9ced6;border-radius:4px;
padding:6px 8px;box-shadow:0 2px 8px rgba(0,0,0,.15);max-width:640px;pointer-events:none;z-index:9}
#tip b{word-break:break-all}#tip table td{padding:0 6px 0 0}
table.grid{border-collapse:collapse;width:100%;background:#fff}
table.grid th,table.grid td{border-bottom:1px solid #e5e8ec;padding:3px 8px;text-align:right;white-space:nowrap}
table.grid th{cursor:pointer;background:#f0f2f5;position:sticky;top:0}
table.grid td.name,table.grid th.name{text-align:left;white-space:normal;word-break:break-all}
table.grid th.asc:after{content:" \25B2"}table.grid th.desc:after{content:" \25BC"}
.note{color:#5b6472;margin:6px 0}
#roofline svg{background:#fff;border:1px solid #e5e8ec}
#roofline circle{fill:#2563eb;fill-opacity:.55;stroke:#1e3a8a}
.src{font:12px/1.35 ui-monospace,Menlo,Consolas,monospace;background:#fff;border:1px solid #e5e8ec;margin-bottom:16px}
.src td{padding:0 8px;white-space:pre}.src td.n{text-align:right;color:#8a93a0}
li.finding{margin-bottom:10px}li.finding.info{color:#5b6472}
.src td.s{text-align:right}.src td.r{color:#5b6472;font-family:system-ui,sans-serif}
</style></head><body data-ready="0">
<header><h1>__TITLE__</h1><span class="sub" id="summary"></span></header>
<nav><button data-view="flame">Flame graph</button><button data-view="kernels">Kernels</button>
<button data-view="roofline">Roofline</button><button data-view="source">Source</button>
<button data-view="findings">Findings</button>
<input id="search" placeholder="search frames (regex)"></nav>
<section id="flame"><div id="crumbs"></div><svg id="flamesvg"></svg></section>
<section id="kernels"><div class="note" id="knote"></div><table class="grid" id="ktable"></table></section>
<section id="roofline"><div class="note" id="roofnote"></div><svg id="roofsvg" width="900" height="520"></svg></section>
<section id="source"><div id="srcbody"></div></section>
<section id="findings"><div id="findbody"></div></section>
<div id="tip"></div>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
window.addEventListener("error", e => { document.body.dataset.error = String(e.message); });
const D = JSON.parse(document.getElementById("data").textContent);
const NAME = D.nodes.name, PARENT = D.nodes.parent, VALUE = D.nodes.value, FULL = D.nodes.full;
const COUNT = NAME.length, kids = Array.from({length: COUNT}, () => []);
for (let i = 1; i < COUNT; i++) if (PARENT[i] >= 0) kids[PARENT[i]].push(i);
kids.forEach(k => k.sort((a, b) => VALUE[b] - VALUE[a]));
const isKernel = new Uint8Array(COUNT);
D.kernels.rows.forEach(r => { isKernel[r[0]] = 1; });
const hue = s => { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) % 997; return h; };
const $ = id => document.getElementById(id);
const esc = s => String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
const fmt = v => v === null || v === undefined ? "" : (Math.abs(v) >= 1e-3 || v === 0 ?
  v.toLocaleString(undefined, {maximumFractionDigits: 3}) : v.toExponential(3));
const hash = () => Object.fromEntries(location.hash.slice(1).split("&").filter(Boolean)
  .map(kv => { const i = kv.indexOf("="), v = kv.slice(i + 1);
    try { return [kv.slice(0, i), decodeURIComponent(v)]; } catch (e) { return [kv.slice(0, i), v]; } }));
const pathOf = i => { const p = []; for (let j = PARENT[i]; j >= 0; j = PARENT[j]) p.unshift(NAME[j]); return p.join(" / "); };
let zoom = 0, pattern = null;
$("summary").textContent = D.summary;

function show(view) {
  document.querySelectorAll("nav button").forEach(b => b.classList.toggle("on", b.dataset.view === view));
  document.querySelectorAll("section").forEach(s => s.classList.toggle("on", s.id === view));
  if (view === "flame") flame();
}
document.querySelectorAll("nav button").forEach(b => b.onclick = () => show(b.dataset.view));

// -- flame graph (icicle: the root on top, width = the chosen metric) -------------------------
const ROW = 18, MIN_PX = 0.5;
function color(i) {
  const h = hue(NAME[i]);
  if (isKernel[i]) return "hsl(" + (20 + h % 30) + ",85%," + (62 + h % 12) + "%)";
  return "hsl(" + (200 + h % 40) + ",55%," + (72 + h % 12) + "%)";
}
function flame() {
  const svg = $("flamesvg"), W = svg.clientWidth || 1200;
  const parts = [], stack = [[zoom, 0, W, 0]];
  let depth = 0;
  while (stack.length) {
    const [i, x, w, d] = stack.pop();
    if (w < MIN_PX) continue;
    depth = Math.max(depth, d);
    parts.push('<rect data-id="' + i + '" x="' + x.toFixed(2) + '" y="' + d * ROW + '" width="' + w.toFixed(3) +
      '" height="' + (ROW - 1) + '" fill="' + color(i) + '"' + (pattern && pattern.test(NAME[i]) ? ' class="match"' : "") + "></rect>");
    if (w > 40) parts.push('<text x="' + (x + 3).toFixed(1) + '" y="' + (d * ROW + 13) + '">' +
      esc(NAME[i].slice(0, Math.floor(w / 6.5))) + "</text>");
    let cx = x;
    const total = VALUE[i] || 0;
    for (const c of kids[i]) {
      const cw = total > 0 ? w * Math.max(VALUE[c], 0) / total : 0;
      stack.push([c, cx, cw, d + 1]); cx += cw;
    }
  }
  svg.setAttribute("height", (depth + 1) * ROW);
  svg.innerHTML = parts.join("");
  const path = []; for (let i = zoom; i >= 0; i = PARENT[i]) path.unshift(i);
  $("crumbs").innerHTML = path.map(i => '<a data-id="' + i + '">' + esc(NAME[i]) + "</a>").join(" › ");
}
$("crumbs").onclick = e => { if (e.target.dataset.id) { zoom = +e.target.dataset.id; flame(); } };
$("flamesvg").onclick = e => { if (e.target.dataset.id) { zoom = +e.target.dataset.id; flame(); } };
$("flamesvg").onmousemove = e => {
  const id = e.target.dataset.id, tip = $("tip");
  if (id === undefined) { tip.style.display = "none"; return; }
  const i = +id, m = D.nodes.metrics;
  tip.innerHTML = "<b>" + esc(FULL[i] || NAME[i]) + "</b><table>" + D.columns.map((c, j) =>
    m[j][i] === null ? "" : "<tr><td>" + esc(c) + "</td><td>" + fmt(m[j][i]) + "</td></tr>").join("") + "</table>";
  tip.style.display = "block";
  tip.style.left = Math.min(e.clientX + 12, innerWidth - 660) + "px"; tip.style.top = e.clientY + 12 + "px";
};
$("flamesvg").onmouseleave = () => { $("tip").style.display = "none"; };
$("search").oninput = e => {
  try { pattern = e.target.value ? new RegExp(e.target.value, "i") : null; } catch (err) { pattern = null; }
  flame(); table();
};

// -- kernels table (the first ROWS after sorting and the search; sorting sees them all) ------
const ROWS = 500;
let sortCol = 1, sortDir = -1;
function table() {
  const K = D.kernels, key = r => sortCol === 0 ? NAME[r[0]] : r[sortCol];
  let rows = pattern ? K.rows.filter(r => pattern.test(NAME[r[0]])) : K.rows.slice();
  rows.sort((a, b) => {
    const x = key(a), y = key(b);
    if (x === y) return 0; if (x === null) return 1; if (y === null) return -1;
    return (x < y ? -1 : 1) * sortDir;
  });
  const shown = rows.slice(0, ROWS);
  $("ktable").innerHTML = "<thead><tr>" + K.columns.map((c, j) => '<th data-col="' + j + '" class="' +
    (j === 0 ? "name " : "") + (j === sortCol ? (sortDir > 0 ? "asc" : "desc") : "") + '">' + esc(c) + "</th>").join("") +
    "</tr></thead><tbody>" + shown.map(r => '<tr><td class="name" title="' + esc(pathOf(r[0])) + '">' +
      esc(NAME[r[0]]) + "</td>" + r.slice(1).map(v => "<td>" + fmt(v) + "</td>").join("") + "</tr>").join("") + "</tbody>";
  $("knote").textContent = rows.length > ROWS ? "the first " + ROWS + " of " + rows.length.toLocaleString() +
    " kernels; sort by a column or search to see others" : rows.length.toLocaleString() + " kernels";
}
$("ktable").onclick = e => {
  const j = e.target.dataset.col; if (j === undefined) return;
  if (+j === sortCol) sortDir = -sortDir; else { sortCol = +j; sortDir = j === "0" ? 1 : -1; }
  table();
};

// -- roofline (log-log: achieved FLOP/s against FLOP per byte) --------------------------------
function roofline() {
  const R = D.roofline, svg = $("roofsvg");
  if (!R.points.length) { $("roofnote").textContent = R.note; svg.style.display = "none"; return; }
  $("roofnote").textContent = R.note;
  const W = 900, H = 520, L = 70, B = 40, T = 16, RR = 16;
  const xs = R.points.map(p => p.x).concat(R.roofs.map(r => r.ridge));
  const ys = R.points.map(p => p.y).concat(R.roofs.map(r => r.peak));
  const x0 = Math.log10(Math.min(...xs)) - 1, x1 = Math.log10(Math.max(...xs)) + 1;
  const y0 = Math.log10(Math.min(...ys)) - 1, y1 = Math.log10(Math.max(...ys)) + 0.5;
  const X = v => L + (Math.log10(v) - x0) / (x1 - x0) * (W - L - RR);
  const Y = v => H - B - (Math.log10(v) - y0) / (y1 - y0) * (H - B - T);
  const out = [];
  for (let e = Math.ceil(x0); e <= x1; e++) out.push('<line x1="' + X(10 ** e) + '" x2="' + X(10 ** e) + '" y1="' + T + '" y2="' + (H - B) +
    '" stroke="#eef0f3"/><text x="' + X(10 ** e) + '" y="' + (H - B + 16) + '" text-anchor="middle" font-size="11">1e' + e + "</text>");
  for (let e = Math.ceil(y0); e <= y1; e++) out.push('<line x1="' + L + '" x2="' + (W - RR) + '" y1="' + Y(10 ** e) + '" y2="' + Y(10 ** e) +
    '" stroke="#eef0f3"/><text x="' + (L - 6) + '" y="' + (Y(10 ** e) + 4) + '" text-anchor="end" font-size="11">1e' + e + "</text>");
  for (const r of R.roofs) {
    const a = 10 ** x0, b = 10 ** x1, ridge = r.ridge;
    out.push('<polyline class="roof" fill="none" stroke="#d14343" stroke-width="2" points="' +
      [[a, Math.min(r.peak, r.bw * a)], [ridge, r.peak], [b, r.peak]].map(([x, y]) => X(x) + "," + Y(y)).join(" ") + '"/>');
    out.push('<text x="' + (W - RR - 4) + '" y="' + (Y(r.peak) - 6) + '" text-anchor="end" font-size="11" fill="#d14343">' + esc(r.label) + "</text>");
  }
  const tmax = Math.max(...R.points.map(p => p.t));
  for (const p of R.points) out.push('<circle class="kernel" cx="' + X(p.x) + '" cy="' + Y(p.y) + '" r="' +
    (3 + 12 * Math.sqrt(p.t / tmax)).toFixed(1) + '"><title>' + esc(p.name + ": " + fmt(p.y / 1e12) + " TFLOP/s, " +
    fmt(p.x) + " FLOP/byte" + (p.frac === null ? "" : ", " + fmt(p.frac * 100) + "% of the " + p.roof + " roof")) + "</title></circle>");
  out.push('<text x="' + (W / 2) + '" y="' + (H - 6) + '" text-anchor="middle">arithmetic intensity, FLOP per byte</text>');
  out.push('<text transform="translate(14,' + (H / 2) + ') rotate(-90)" text-anchor="middle">achieved FLOP/s</text>');
  svg.innerHTML = out.join("");
}

// -- source heat ---------------------------------------------------------------------------------
function source() {
  const S = D.source;
  if (!S.length) { $("srcbody").innerHTML = '<p class="note">No PC samples in this profile: profile with <code>proton -m pcsampling</code> to see each kernel\u2019s source lines by samples and stall reasons.</p>'; return; }
  $("srcbody").innerHTML = S.map(k => "<h3>" + esc(k.name) + '</h3><p class="note">' + esc(k.headline) + "</p>" +
    k.files.map(f => '<p class="note">' + esc(f.path) + "</p><table class=\"src\">" + f.lines.map(l =>
      '<tr style="background:' + (l.share ? "rgba(220,38,38," + (0.08 + 0.6 * l.share).toFixed(3) + ")" : "transparent") +
      '"><td class="s">' + (l.samples ? l.samples.toLocaleString() : "") + '</td><td class="r">' + esc(l.stalls || "") +
      '</td><td class="n">' + l.line + "</td><td>" + esc(l.code) + "</td></tr>").join("") + "</table>").join("")).join("");
}

// -- findings (proton-viewer --diagnose) ---------------------------------------------------------
function findings() {
  const F = D.findings;
  $("findbody").innerHTML = (F.items.length ? "<ol>" + F.items.map(f => '<li class="finding' + (f.info ? " info" : "") +
    '"><b>' + esc(f.info ? "info" : f.rule) + "</b> " + esc(f.kernel) + ": " + fmt(f.time_ns / 1e6) + " ms, " +
    Math.round(f.share * 100) + '% of GPU time<br><span class="note">at ' + esc(f.path) + "</span><br>" + esc(f.evidence) +
    "<br><i>try:</i> " + esc(f.advice) + "</li>").join("") + "</ol>" : '<p class="note">No findings from the rules that ran: ' +
    esc(F.rules_run.join(", ") || "none") + ".</p>") +
    F.notes.map(n => '<p class="note">' + esc(n) + "</p>").join("");
}

const h = hash();
if (h.sort) { const [c, d] = h.sort.split(":"); const j = D.kernels.columns.indexOf(c);
  if (j >= 0) { sortCol = j; sortDir = d === "asc" ? 1 : -1; } }
if (h.zoom) zoom = Math.max(0, Math.min(COUNT - 1, +h.zoom || 0));
if (h.search) { $("search").value = h.search; try { pattern = new RegExp(h.search, "i"); } catch (e) {} }
table(); roofline(); source(); findings();
show(h.view || "flame");
document.body.dataset.ready = "1";
</script></body></html>
"""
