"use strict";
// The report's views. Each view is one function that draws its section from D (the profile)
// and S (what the user chose); VIEWS maps a tab's name to it. A new tab: a <nav> button, a
// <section> of the same id, and VIEWS.name = function.
window.addEventListener("error", e => { document.body.dataset.error = String(e.message); });
const $ = id => document.getElementById(id);
const D = JSON.parse($("data").textContent);
const NAME = D.nodes.name, PARENT = D.nodes.parent, VALUE = D.nodes.value, FULL = D.nodes.full;
const COUNT = NAME.length, kids = Array.from({length: COUNT}, () => []);
for (let i = 1; i < COUNT; i++) if (PARENT[i] >= 0) kids[PARENT[i]].push(i);
kids.forEach(k => k.sort((a, b) => VALUE[b] - VALUE[a]));
const K = D.kernels, ROWS = K.rows, COPIES = new Set(K.copies || []);
const rowOf = new Int32Array(COUNT).fill(-1);  // kernel frame -> its row in the kernels table
ROWS.forEach((r, j) => r[0].forEach(i => { rowOf[i] = j; }));
const P = D.roofline.points;  // columns in the file, objects here
D.roofline.points = P.x.map((x, k) => ({i: P.i[k], row: P.i[k] >= 0 ? rowOf[P.i[k]] : -1, x, y: P.y[k],
  t: P.t[k], frac: P.frac[k], roof: P.kinds[P.roof[k]], name: P.name[k], src: P.sources[P.s[k]],
  lv: (P.lv || [])[k] || "DRAM", levels: (P.levels || {})[k] || null}));
const pointsOf = ROWS.map(() => []);  // row -> its roofline points
D.roofline.points.forEach((p, k) => { if (p.row >= 0) pointsOf[p.row].push(k); });
const sourceOf = new Map(D.source.map((k, j) => [k.name, j]));

const S = {view: "flame", zoom: 0, pattern: null, search: "", sortCol: 2, sortDir: -1,
           kernel: -1, focus: null, shade: -1, sandwich: null};
const VIEWS = {flame, kernels, roofline, source, findings, warps};
// Only the views the profile has: a CPU-only profile has no kernels, a profile without
// flops no roofline. What is left out, and how to get it, is said beside the tabs.
const ABSENT = {};
if (!ROWS.length) ABSENT.kernels = "no kernel times (profile a run on a GPU)";
if (!D.roofline.points.length) ABSENT.roofline = D.roofline.note;
if (!D.source.length) ABSENT.source = "no PC samples (profile with proton -m pcsampling)";
if (!ROWS.length && !D.findings.items.length) ABSENT.findings = D.findings.notes[0] || "no kernel times";
if (!D.warps.length) ABSENT.warps = "no kernel scopes (proton.language, backend=\"instrumentation\")";
for (const v of Object.keys(ABSENT)) {
  delete VIEWS[v];
  document.querySelector('#tabs button[data-view="' + v + '"]').remove();
}
if (Object.keys(ABSENT).length) {
  const why = Object.entries(ABSENT).map(([v, r]) => v + ": " + r).join("\n");
  $("absent").textContent = "not in this profile: " + Object.keys(ABSENT).join(", ");
  $("absent").title = why;
}

const esc = s => String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
  '"': "&quot;", "'": "&#39;"}[c]));
// -- numbers: one value written one way wherever the page shows it ---------------------------
// A metric's decimals are chosen once, from every value of it the page holds (its frames'
// and its kernels' rows): enough for the largest value's 4 digits and the smallest's 2, at
// most 3 (1 for a percentage), none for whole numbers. The flame graph's labels and details,
// the kernels table, the tooltips and the findings all write it so: 0.030 ms is "0.030" in
// the table and "0.030 ms" in the graph, never "0.0300 ms" nor "0.03".
function places(values, most = 3) {
  let max = 0, min = Number.MAX_VALUE, whole = true;
  for (const v of values) if (v !== null && v !== undefined && isFinite(v)) {
    const a = Math.abs(v); max = Math.max(max, a); if (a > 0) min = Math.min(min, a); whole = whole && Number.isInteger(v);
  }
  if (whole || max === 0) return 0;
  return Math.max(0, Math.min(most, Math.max(3 - Math.floor(Math.log10(max)), 1 - Math.floor(Math.log10(min)))));
}
const FORMATS = [];  // a formatter per number of decimals, made once (toLocaleString makes one a call)
function num(v, d) {  // the one number writer: d decimals, thousands separated; a value that rounds to 0 but is not, "<0.001"
  if (v === null || v === undefined) return "";
  const s = (FORMATS[d] || (FORMATS[d] = new Intl.NumberFormat("en-US", {minimumFractionDigits: d, maximumFractionDigits: d}))).format(v);
  return v !== 0 && /^-?[0.,]+$/.test(s) ? (v < 0 ? ">-" : "<") + (10 ** -d).toFixed(d) : s;
}
const PLACES = new Map();  // metric header -> its decimals on this page
function placesOf(header) {
  if (!PLACES.has(header)) {
    const j = D.columns.indexOf(header), k = K.columns.indexOf(header);
    const values = (j >= 0 ? D.nodes.metrics[j] : []).concat(j === 0 ? VALUE : [],  // a scope's width spans its children
                                                            k >= 2 ? K.rows.map(r => r[k]) : []);
    PLACES.set(header, j < 0 && k < 2 ? null : places(values, header.includes("%") ? 1 : 3));
  }
  return PLACES.get(header);
}
const unitOf = header => ((header || "").match(/\(([^)]+)\)\s*$/) || [])[1] || "";
const metric = (v, header) => placesOf(header) === null ? fmt(v) : num(v, placesOf(header));  // as its column writes it
const withUnit = (v, header) => { const u = unitOf(header); return metric(v, header) + (u ? " " + u : ""); };
const fmt = v => v === null || v === undefined ? "" : num(v, places([v], 6));  // a figure of no metric
const pct = v => v >= 10 || v === 0 ? num(v, 0) + "%" : v >= 0.1 ? num(v, 1) + "%" : "<0.1%";  // a share of a frame
const hue = s => { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) % 997; return h; };
const pathTo = i => { const p = []; for (let j = PARENT[i]; j >= 0; j = PARENT[j]) p.unshift(NAME[j]); return p; };
const link = (params, text, title) => '<a class="go" href="#' + Object.entries(params).map(([k, v]) =>
  k + "=" + encodeURIComponent(v)).join("&") + '"' + (title ? ' title="' + esc(title) + '"' : "") + ">" + esc(text) + "</a>";
// break opportunities in long kernel names, after separators only (never inside a word)
const wrappable = s => esc(s).replace(/(_|::|,|\/|\.)/g, "$1<wbr>").replace(/(&lt;|\()/g, "<wbr>$1");

$("summary").textContent = D.columns.length && D.nodes.metrics[0][0] ? D.summary.replace("widths: " + D.columns[0],
  "widths: " + D.columns[0] + ", total " + metric(D.nodes.metrics[0][0], D.columns[0])) : D.summary;

// -- the state in the address (#view=...&zoom=...): links between views, shareable ---------
function readHash() {
  const h = Object.fromEntries(location.hash.slice(1).split("&").filter(Boolean).map(kv => {
    const i = kv.indexOf("="), v = kv.slice(i + 1);
    try { return [kv.slice(0, i), decodeURIComponent(v)]; } catch (e) { return [kv.slice(0, i), v]; }
  }));
  if (h.sort) { const c = h.sort.lastIndexOf(":"), j = K.columns.indexOf(h.sort.slice(0, c));
    if (j >= 0) { S.sortCol = j; S.sortDir = h.sort.slice(c + 1) === "asc" ? 1 : -1; } }
  if (h.shade !== undefined) S.shade = D.columns.indexOf(h.shade);
  if (h.zoom !== undefined) S.zoom = Math.max(0, Math.min(COUNT - 1, +h.zoom || 0));
  S.sandwich = h.sandwich !== undefined ? h.sandwich : null;
  if (h.search !== undefined) { $("search").value = h.search; setPattern(h.search); }
  if (h.warp !== undefined && D.warps.length) WARP.k = Math.max(0, Math.min(D.warps.length - 1, +h.warp || 0));
  if (h.kernel !== undefined) {
    S.kernel = ROWS.findIndex(r => NAME[r[0][0]] === h.kernel);
    S.focus = h.kernel;
  }
  show(VIEWS[h.view] ? h.view : S.view);
}
function writeHash() {
  const h = {view: S.view};
  if (S.zoom) h.zoom = S.zoom;
  if (S.sandwich !== null && S.view === "flame") h.sandwich = S.sandwich;
  if (S.shade >= 0) h.shade = D.columns[S.shade];
  if (S.search) h.search = S.search;
  if (S.kernel >= 0) h.kernel = NAME[ROWS[S.kernel][0][0]];
  if (S.view === "warps" && WARP.k) h.warp = WARP.k;
  history.replaceState(null, "", "#" + Object.entries(h).map(([k, v]) => k + "=" + encodeURIComponent(v)).join("&"));
}
function setPattern(text) {
  S.search = text;
  S.pattern = searchPattern(text);
}
function show(view) {
  S.view = view;
  document.querySelectorAll("#tabs button").forEach(b => b.classList.toggle("on", b.dataset.view === view));
  document.querySelectorAll("body > section").forEach(s => s.classList.toggle("on", s.id === view));
  $("tip").style.display = "none";
  VIEWS[view]();
}
document.querySelectorAll("#tabs button").forEach(b => b.onclick = () => { show(b.dataset.view); writeHash(); });
$("search").oninput = e => { setPattern(e.target.value); show(S.view); writeHash(); };
window.addEventListener("hashchange", readHash);
let resizing = 0;
window.addEventListener("resize", () => { cancelAnimationFrame(resizing); resizing = requestAnimationFrame(() => {
  if (S.view === "flame" || S.view === "roofline" || S.view === "warps" || S.view === "kernels") show(S.view); }); });

function tipAt(e, html) {
  const tip = $("tip");
  tip.innerHTML = html; tip.style.display = "block";
  tip.style.left = Math.max(0, Math.min(e.clientX + 12, innerWidth - tip.offsetWidth - 8)) + "px";
  tip.style.top = (e.clientY + 16 + tip.offsetHeight > innerHeight ? e.clientY - tip.offsetHeight - 8 : e.clientY + 16) + "px";
}
const hideTip = () => { $("tip").style.display = "none"; };
function metricsTable(i) {
  const m = D.nodes.metrics;
  return "<table>" + D.columns.map((c, j) => m[j][i] === null ? "" : "<tr><td>" + esc(c) + "</td><td>" +
    metric(m[j][i], c) + "</td></tr>").join("") + (VALUE[0] > 0 ? "<tr><td>share of the whole</td><td>" +
    pct(100 * VALUE[i] / VALUE[0]) + "</td></tr>" : "") + "</table>";
}

// -- flame graph (icicle: the root on top, width = the chosen metric) -------------------------
// Zoomed, the frame's ancestors stay on top at full width (as speedscope does); frames too
// narrow to see are drawn as one grey block per parent; labels are cut to fit with an ellipsis.
const MIN_PX = 1, PAD = 3, MIN_INFO = 180;  // px: the details' least height
const FONT = '11px system-ui,-apple-system,"Segoe UI",sans-serif';
let measure = null;
function fit(text, room) {
  if (room < 12) return "";
  if (!measure) { measure = document.createElement("canvas").getContext("2d"); measure.font = FONT; }
  if (measure.measureText(text).width <= room) return text;
  let lo = 0, hi = text.length - 1;  // the longest prefix that fits with its ellipsis
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (measure.measureText(text.slice(0, mid) + "\u2026").width <= room) lo = mid; else hi = mid - 1;
  }
  return lo ? text.slice(0, lo) + "\u2026" : "";
}
// Colours by what a frame is (the legend says so): a GPU kernel warm, a python frame (or a
// kernel's source line) green, any other scope blue; the hue varies a little by name.
const PYFRAME = /\((?:[^()]*[\/\\])?[^()\/\\]+:\d+\)$/;
const isPython = i => FULL[i] !== undefined && PYFRAME.test(NAME[i]);
// Or, chosen beside the key, by one of the metric columns (memory, waits, idle share, ...): each
// frame's value over the largest, on the source view's heat scale; frames without one grey.
const SHADE_TOP = D.nodes.metrics.map(col => col.reduce((m, v) => v !== null && v > m ? v : m, 0));
const NO_VALUE = "#e5e7eb";
function shadeOf(i) {  // [background, text] when colouring by a metric, else null
  if (S.shade < 0 || S.shade >= D.columns.length) return null;
  const v = D.nodes.metrics[S.shade][i], top = SHADE_TOP[S.shade];
  return v === null || !(top > 0) ? [NO_VALUE, "#111"] : heat(Math.max(0, v) / top);
}
function color(i) {
  const shade = shadeOf(i);
  if (shade) return shade[0];
  const h = hue(NAME[i]);
  if (rowOf[i] >= 0) return "hsl(" + (20 + h % 30) + ",85%," + (62 + h % 12) + "%)";
  if (isPython(i)) return "hsl(" + (100 + h % 40) + ",45%," + (70 + h % 12) + "%)";
  return "hsl(" + (200 + h % 40) + ",55%," + (72 + h % 12) + "%)";
}
const amount = v => withUnit(v, D.columns[0] || "");  // a width, in the width metric's unit
function label(i, room) {  // as speedscope: the name with its time and share where they fit
  const whole = VALUE[0] > 0 ? pct(100 * VALUE[i] / VALUE[0]) : "";
  for (const text of [NAME[i] + " \u2014 " + amount(VALUE[i]) + (whole ? ", " + whole : ""),
                      whole ? NAME[i] + " \u2014 " + whole : ""])
    if (text && fit(text, room) === text) return text;
  return fit(NAME[i], room);
}
const KEYS = [["hsl(35,85%,66%)", "GPU kernel"], ["hsl(115,45%,74%)", "python frame or source line"],
              ["hsl(215,55%,76%)", "scope"], ["#cfd4db", "frames too narrow to draw"]];
function flame() {
  if (S.sandwich !== null && NAME.includes(S.sandwich)) return sandwich();
  const box = $("flamebox"), svg = $("flamesvg"), pat = S.pattern;
  const path = [];
  for (let i = S.zoom; i >= 0; i = PARENT[i]) path.unshift(i);
  $("crumbs").innerHTML = path.map(i => '<a data-id="' + i + '">' + esc(NAME[i]) + "</a>").join(" \u203a ") +
    '<span class="matches"></span>';
  const shading = S.shade >= 0 && S.shade < D.columns.length;
  const keys = shading ? [["linear-gradient(90deg," + heat(0)[0] + "," + heat(1)[0] + ")",
    "0 to " + metric(SHADE_TOP[S.shade], D.columns[S.shade]) + " " + D.columns[S.shade]], [NO_VALUE, "no value"]] : KEYS;
  $("flamekey").innerHTML = keys.concat(pat ? [["#e040fb", "search match"]] : []).map(([c, t]) =>
    '<span class="key"><i style="background:' + c + '"></i>' + esc(t) + "</span>").join("") +
    (D.columns.length ? '<span class="key">width: ' + esc(D.columns[0]) + "</span>" +
      '<span class="key">colour: <select id="shade" aria-label="colour the frames by">' +
      '<option value="-1">what a frame is</option>' + D.columns.map((c, j) => '<option value="' + j + '"' +
        (j === S.shade ? " selected" : "") + ">" + esc(c) + "</option>").join("") + "</select></span>" : "");
  info(S.zoom);
  const W = svg.clientWidth || box.clientWidth || 1200, ROW = 20;
  const parts = [], labels = [];
  let depth = 0, matches = 0;
  const rect = (i, x, w, d, cls) => {
    const hit = pat && pat.test(NAME[i]);
    matches += hit ? 1 : 0;
    parts.push('<rect data-id="' + i + '" x="' + x.toFixed(2) + '" y="' + d * ROW + '" width="' + w.toFixed(3) +
      '" height="' + (ROW - 1) + '" fill="' + color(i) + '"' + (hit ? ' class="match"' : cls ? ' class="' + cls + '"' : "") + "></rect>");
    const text = label(i, w - 2 * PAD), shade = shadeOf(i);
    if (text) labels.push('<text x="' + (x + PAD).toFixed(1) + '" y="' + (d * ROW + 14) + '"' +
      (shade ? ' fill="' + shade[1] + '"' : "") + ">" + esc(text) + "</text>");
  };
  const ancestors = [];
  for (let i = PARENT[S.zoom]; i >= 0; i = PARENT[i]) ancestors.unshift(i);
  ancestors.forEach((i, d) => rect(i, 0, W, d, "anc"));
  const above = ancestors.length;
  const stack = [[S.zoom, 0, W, above]];
  while (stack.length) {
    const [i, x, w, d] = stack.pop();
    depth = Math.max(depth, d);
    rect(i, x, w, d, "");
    const total = VALUE[i] || 0;
    let cx = x, small = 0, smallW = 0;
    for (const c of kids[i]) {
      const cw = total > 0 ? w * Math.max(VALUE[c], 0) / total : 0;
      if (cw >= MIN_PX) stack.push([c, cx, cw, d + 1]); else { small++; smallW += cw; }
      cx += cw;
    }
    if (small && smallW >= MIN_PX) {  // the narrow children, last (children go widest first)
      depth = Math.max(depth, d + 1);
      parts.push('<rect class="more" data-more="' + i + '" data-n="' + small + '" x="' + (cx - smallW).toFixed(2) +
        '" y="' + (d + 1) * ROW + '" width="' + smallW.toFixed(3) + '" height="' + (ROW - 1) + '"></rect>');
    }
  }
  svg.setAttribute("height", (depth + 1) * ROW);
  svg.innerHTML = parts.join("") + labels.join("");
  fitBox((depth + 1) * ROW, most => info(S.zoom, most));
  if (pat) $("crumbs").lastChild.textContent = matches.toLocaleString("en-US") + " drawn frame" +
    (matches === 1 ? "" : "s") + " match";
}
function fitBox(tall, refill) {
  // the graph's box as tall as the tree (up to what leaves the details MIN_INFO), the
  // details the rest of the window: a shallow tree leaves no blank panel, a deep one scrolls
  const box = $("flamebox"), room = innerHeight - box.getBoundingClientRect().top - 4;
  box.style.height = (tall + 2 <= room - MIN_INFO ? tall + 2 : Math.max(room - MIN_INFO, Math.min(160, room / 2))) + "px";
  const el = $("flameinfo");
  el.style.height = Math.max(60, innerHeight - el.getBoundingClientRect().top - 2) + "px";
  // as many of the listed frames as the details hold (12 at least; past them, it scrolls)
  const listed = el.querySelectorAll(".under tbody tr");
  if (el.scrollHeight > el.clientHeight + 1 && listed.length > 12) {
    const per = (listed[listed.length - 1].getBoundingClientRect().bottom - listed[0].getBoundingClientRect().top) / listed.length;
    refill(Math.max(12, listed.length - Math.ceil((el.scrollHeight - el.clientHeight) / per) - 1));
  }
}

// -- sandwich (as speedscope's): one function wherever it is in the tree, its callers merged
// above it (upside down: its caller right above it) and its callees merged below; widths are
// its outermost places' time (a place inside another counted once). The call tree itself is
// speedscope's left-heavy view: identical paths merged, the widest first.
const MERGED_MOST = 200000;  // nodes of a merged tree: a deep recursive profile stays bounded
function outermost(name) {  // its outermost frames: none of them under another of the same name
  const out = [];
  for (let i = 0; i < COUNT; i++) if (NAME[i] === name) {
    let j = PARENT[i];
    while (j >= 0 && NAME[j] !== name) j = PARENT[j];
    if (j < 0) out.push(i);
  }
  return out;
}
function mergedTree(from, up) {  // a tree of names over `from`: down each one's callees, or up its callers
  const t = {name: [NAME[from[0]]], value: [0], frame: [from[0]], kids: [new Map()]};
  const at = (n, i) => {  // n's child named as frame i (made if new)
    let c = t.kids[n].get(NAME[i]);
    if (c === undefined && t.name.length < MERGED_MOST) {
      c = t.name.length; t.kids[n].set(NAME[i], c);
      t.name.push(NAME[i]); t.value.push(0); t.frame.push(i); t.kids.push(new Map());
    }
    return c;
  };
  for (const o of from) {
    t.value[0] += VALUE[o];
    if (up) {
      let n = 0;
      for (let j = PARENT[o]; j >= 0 && n !== undefined; j = PARENT[j]) { n = at(n, j); if (n !== undefined) t.value[n] += VALUE[o]; }
    } else {
      const stack = [[o, 0]];
      while (stack.length) {
        const [i, n] = stack.pop();
        for (const c of kids[i]) { const m = at(n, c); if (m !== undefined) { t.value[m] += VALUE[c]; stack.push([c, m]); } }
      }
    }
  }
  return t;
}
function mergedRect(t, n, x, w, y, ROW, parts, labels) {  // a merged frame: a click gives its own sandwich
  const whole = VALUE[0] > 0 ? pct(100 * t.value[n] / VALUE[0]) : "";
  const full = t.name[n] + " \u2014 " + amount(t.value[n]) + (whole ? ", " + whole : "");
  parts.push('<rect data-sw="' + esc(t.name[n]) + '" data-tip="' + esc(full) + '" x="' + x.toFixed(2) + '" y="' + y +
    '" width="' + w.toFixed(3) + '" height="' + (ROW - 1) + '" fill="' + color(t.frame[n]) + '"></rect>');
  const text = [full, t.name[n]].map(s => fit(s, w - 2 * PAD)).find(s => s && !s.endsWith("\u2026")) || fit(t.name[n], w - 2 * PAD);
  if (text) labels.push('<text x="' + (x + PAD).toFixed(1) + '" y="' + (y + 14) + '">' + esc(text) + "</text>");
}
function drawMerged(t, W, ROW, rowOfDepth, parts, labels, root = true) {  // widest first; returns its depth
  let depth = 0;
  const stack = [[0, 0, W, 0]];
  while (stack.length) {
    const [n, x, w, d] = stack.pop();
    depth = Math.max(depth, d);
    if (d || root) mergedRect(t, n, x, w, rowOfDepth(d) * ROW, ROW, parts, labels);
    const total = t.value[n] || 0;
    let cx = x;
    for (const c of [...t.kids[n].values()].sort((a, b) => t.value[b] - t.value[a])) {
      const cw = total > 0 ? w * Math.max(t.value[c], 0) / total : 0;
      if (cw >= MIN_PX) stack.push([c, cx, cw, d + 1]);
      cx += cw;
    }
  }
  return depth;
}
function sandwich() {
  const name = S.sandwich, from = outermost(name), svg = $("flamesvg"), box = $("flamebox");
  const W = svg.clientWidth || box.clientWidth || 1200, ROW = 20;
  const callers = mergedTree(from, true), callees = mergedTree(from, false);
  const above = (() => { let d = 0; const st = [[0, 0]]; while (st.length) { const [n, k] = st.pop(); d = Math.max(d, k);
    for (const c of callers.kids[n].values()) st.push([c, k + 1]); } return d; })();
  const parts = [], labels = [];
  drawMerged(callers, W, ROW, d => above - d, parts, labels);
  const below = drawMerged(callees, W, ROW, d => above + d, parts, labels, false);  // the function once, between
  const rows = above + below + 1;
  svg.setAttribute("height", rows * ROW);
  svg.innerHTML = parts.join("") + labels.join("");
  $("crumbs").innerHTML = '<a data-id="' + S.zoom + '">\u2190 call tree</a> \u203a sandwich of <b>' + esc(name) +
    "</b>: its callers above it, its callees below";
  sandwichInfo(from);
  fitBox(rows * ROW, most => sandwichInfo(from, most));
}
function sandwichInfo(from, most = UNDER_MOST) {
  const total = from.reduce((a, i) => a + VALUE[i], 0);
  const rows = from.slice().sort((a, b) => VALUE[b] - VALUE[a]).slice(0, most).map(i => '<tr><td class="name"><a data-id="' + i + '">' +
    esc(pathTo(i).concat(NAME[i]).join(" / ")) + "</a></td><td>" + amount(VALUE[i]) + "</td><td>" +
    (total > 0 ? pct(100 * VALUE[i] / total) : "") + "</td></tr>");
  $("flameinfo").innerHTML = "<b>" + esc(FULL[from[0]] || NAME[from[0]]) + "</b>" +
    '<div class="note">' + from.length.toLocaleString("en-US") + " place" + (from.length === 1 ? "" : "s") + " in the call tree, " +
    amount(total) + (VALUE[0] > 0 ? " (" + pct(100 * total / VALUE[0]) + " of the whole)" : "") + "; click a place to see it in the call tree</div>" +
    '<div class="infocols"><div class="under"><table><thead><tr><th class="name">its places</th><th>' + esc(D.columns[0] || "") +
    "</th><th>of it</th></tr></thead><tbody>" + rows.join("") + "</tbody></table>" +
    (from.length > most ? '<p class="note">' + (from.length - most).toLocaleString("en-US") + " more</p>" : "") + "</div></div>";
}

// The details: the frame, its links, its metrics and, beside them, the frames under it as the
// terminal's tree draws them (depth first, widest first, indented), as many as UNDER_MOST:
// a shallow profile's whole tree, a deep one's hottest paths. Frames of no width (a kernel's
// own scopes, its sampled lines) are counted, not listed, with where to see them.
const UNDER_MOST = 40;
const SIZE = new Int32Array(COUNT).fill(1);  // frames in each frame's subtree, itself included
for (let i = COUNT - 1; i > 0; i--) if (PARENT[i] >= 0) SIZE[PARENT[i]] += SIZE[i];
function kernelAt(i) {  // the kernel frame at or above i, or -1
  for (let j = i; j >= 0; j = PARENT[j]) if (rowOf[j] >= 0) return j;
  return -1;
}
function warpOf(i) {  // the Warps tab's timeline of kernel frame i (its name and call path), or -1
  const above = pathTo(i).slice(1).join(" > "), same = D.warps.map((w, k) => w.kernel === NAME[i] ? k : -1).filter(k => k >= 0);
  return same.find(k => D.warps[k].path === above) ?? (same.length ? same[0] : -1);
}
function kernelLinks(i) {  // where else a kernel frame (or a frame inside one) is shown
  const k = kernelAt(i), out = [];
  if (k < 0) return out;
  if (k === i) out.push(link({view: "kernels", kernel: NAME[k]}, "kernels table"));
  if (k === i && pointsOf[rowOf[k]].length) out.push(link({view: "roofline", kernel: NAME[k]}, "roofline"));
  if (sourceOf.has(NAME[k])) out.push(link({view: "source", kernel: NAME[k]}, "source"));
  if (warpOf(k) >= 0) out.push(link({view: "warps", warp: warpOf(k)}, "warps", "its scopes across warps and CTAs"));
  return out;
}
function info(i, most = UNDER_MOST) {
  const rows = [], stack = kids[i].map(c => [c, 0]).reverse(), blank = new Set();
  let none = 0;
  while (stack.length && rows.length < most) {
    const [c, d] = stack.pop();
    if (!(VALUE[c] > 0)) { none += SIZE[c]; kernelLinks(c).forEach(l => blank.add(l)); continue; }
    rows.push('<tr><td class="name" style="padding-left:' + d * 14 + 'px"><a data-id="' + c + '">' + wrappable(NAME[c]) +
      "</a></td><td>" + amount(VALUE[c]) + "</td><td>" + (VALUE[i] > 0 ? pct(100 * VALUE[c] / VALUE[i]) : "") + "</td></tr>");
    for (let k = kids[c].length - 1; k >= 0; k--) stack.push([kids[c][k], d + 1]);
  }
  for (const [c] of stack) if (!(VALUE[c] > 0)) { none += SIZE[c]; kernelLinks(c).forEach(l => blank.add(l)); }
  const left = SIZE[i] - 1 - rows.length - none;
  const notes = (left > 0 ? left.toLocaleString("en-US") + " more frame" + (left === 1 ? "" : "s") + " under it: zoom in to see them. " : "") +
    (none ? none.toLocaleString("en-US") + " frame" + (none === 1 ? "" : "s") + " with no " + esc(D.columns[0] || "value") +
      " not listed" + (blank.size ? " (inside a kernel: " + [...blank].join(" ") + ")" : "") + "." : "");
  const links = kernelLinks(i);
  if (i > 0) links.push(link({view: "flame", zoom: S.zoom, sandwich: NAME[i]}, "callers and callees",
    "sandwich: this function wherever it is in the tree, its callers above it and its callees below"));
  $("flameinfo").innerHTML = "<b>" + esc(FULL[i] || NAME[i]) + "</b>" + (links.length ? " " + links.join(" ") : "") +
    '<div class="note">' + esc(pathTo(i).concat(NAME[i]).join(" / ")) + '</div><div class="infocols">' + metricsTable(i) +
    (rows.length || notes ? '<div class="under">' + (rows.length ? '<table><thead><tr><th class="name">under it</th><th>' +
      esc(D.columns[0] || "") + "</th><th>of it</th></tr></thead><tbody>" + rows.join("") + "</tbody></table>" : "") +
      (notes ? '<p class="note">' + notes + "</p>" : "") + "</div>" : "") + "</div>";
}
$("flamekey").onchange = e => { if (e.target.id === "shade") { S.shade = +e.target.value; flame(); writeHash(); } };
$("flameinfo").onclick = e => { const a = e.target.closest("[data-id]"); if (a) zoomTo(+a.dataset.id); };
const zoomTo = i => { S.zoom = i; S.sandwich = null; flame(); writeHash(); };
$("crumbs").onclick = e => { if (e.target.dataset.id) zoomTo(+e.target.dataset.id); };
$("flamesvg").onclick = e => {
  if (e.target.dataset.id) zoomTo(+e.target.dataset.id);
  else if (e.target.dataset.sw !== undefined) { S.sandwich = e.target.dataset.sw; flame(); writeHash(); }
};
$("flamesvg").onmousemove = e => {
  const t = e.target.dataset;
  if (t.id !== undefined) tipAt(e, "<b>" + esc(FULL[+t.id] || NAME[+t.id]) + "</b>" + metricsTable(+t.id));
  else if (t.sw !== undefined) tipAt(e, esc(t.tip) + "<br>click for its own callers and callees");
  else if (t.more !== undefined) tipAt(e, (+t.n).toLocaleString("en-US") + " frames under <b>" + esc(NAME[+t.more]) +
    "</b>, each too narrow to draw: zoom in to see them");
  else hideTip();
};
$("flamesvg").onmouseleave = hideTip;

// -- kernels table: one row per kernel, its call paths folded in ------------------------------
const SHOWN = 500;
function pathsText(r) {  // "forward 60% · backward 40%": where the kernel's time went
  const at = i => pathTo(i).slice(1).join(" / ") || "(top level)";
  if (r[0].length === 1) return esc(at(r[0][0]));
  const total = r[1].reduce((a, b) => a + b, 0) || 1;
  const shown = r[0].slice(0, 3).map((i, k) => esc(at(i)) + " " + Math.round(100 * r[1][k] / total) + "%");
  return shown.join(" \u00b7 ") + (r[0].length > 3 ? " \u00b7 +" + (r[0].length - 3) + " more" : "");
}
function kernels() {
  const key = j => r => j === 0 ? NAME[r[0][0]] : j === 1 ? pathTo(r[0][0]).join("/") : r[j];
  const k = key(S.sortCol), pat = S.pattern;
  let rows = ROWS.map((r, j) => j);
  if (pat) rows = rows.filter(j => pat.test(NAME[ROWS[j][0][0]]));
  rows.sort((a, b) => {
    const x = k(ROWS[a]), y = k(ROWS[b]);
    if (x === y) return 0; if (x === null) return 1; if (y === null) return -1;
    return (x < y ? -1 : 1) * S.sortDir;
  });
  const calls = rows.reduce((n, j) => n + ROWS[j][0].length, 0);
  $("ktable").innerHTML = "<thead><tr>" + K.columns.map((c, j) => '<th data-col="' + j + '" class="' +
    (j === 0 ? "name " : j === 1 ? "paths " : "") + (j === S.sortCol ? (S.sortDir > 0 ? "asc" : "desc") : "") + '">' + wrappable(c) + "</th>").join("") +
    "</tr></thead><tbody>" + rows.slice(0, SHOWN).map(j => {
      const r = ROWS[j], i = r[0][0];
      const go = [link({view: "flame", zoom: i}, "flame", "zoom the flame graph to its hottest call path")];
      if (pointsOf[j].length) go.push(link({view: "roofline", kernel: NAME[i]}, "roofline"));
      if (sourceOf.has(NAME[i])) go.push(link({view: "source", kernel: NAME[i]}, "source"));
      return '<tr data-row="' + j + '"' + (j === S.kernel ? ' class="sel"' : "") + '><td class="name" title="' +
        esc(FULL[i] || NAME[i]) + '">' + wrappable(NAME[i]) + " " + go.join("") + '</td><td class="paths" title="' +
        esc(r[0].map(f => pathTo(f).join(" / ")).join("\n")) + '">' + pathsText(r) + "</td>" +
        r.slice(2).map((v, c) => "<td>" + metric(v, K.columns[c + 2]) + "</td>").join("") + "</tr>";
    }).join("") + "</tbody>";
  $("kscroll").style.maxHeight = Math.max(200, innerHeight - $("kscroll").getBoundingClientRect().top - 4) + "px";
  const sets = rows.filter(j => COPIES.has(j)).length, runs = rows.length - sets;  // copies and sets are rows, not kernels
  const what = runs.toLocaleString("en-US") + " kernel" + (runs === 1 ? "" : "s") +
    (sets ? ", " + sets.toLocaleString("en-US") + " cop" + (sets === 1 ? "y or set" : "ies or sets") : "") +
    (calls > rows.length ? " (" + calls.toLocaleString("en-US") + " call paths)" : "");
  $("knote").textContent = rows.length > SHOWN ? "the first " + SHOWN + " of " + what +
    "; sort by a column or search to see others" : what + (VIEWS.roofline ? "; click a row to find it in the roofline" : "");
}
$("ktable").onclick = e => {
  const th = e.target.closest("th"), tr = e.target.closest("tbody tr");
  if (th) {
    const j = +th.dataset.col;
    if (j === S.sortCol) S.sortDir = -S.sortDir; else { S.sortCol = j; S.sortDir = j < 2 ? 1 : -1; }
  } else if (tr && !e.target.closest("a")) {
    const j = +tr.dataset.row;
    S.kernel = S.kernel === j ? -1 : j;
  } else return;
  kernels(); writeHash();
};

// -- roofline (log-log: achieved FLOP/s against FLOP per byte) --------------------------------
const SI = ["k", "M", "G", "T", "P", "E"];
const si = e => e < 0 ? (10 ** e).toFixed(-e) : e >= 21 ? "1e" + e :  // 0.01, 1, 10 k, 100 T
  10 ** (e % 3) + (e >= 3 ? " " + SI[Math.floor(e / 3) - 1] : "");
// The dots go on a canvas (90,000 draw in well under a second; as SVG they took seconds);
// the axes, roofs, labels and the marked kernel on an SVG above it, so nothing covers a label.
const DOT = {x: null, y: null, r: null, grid: null, cell: 32, cols: 0};
// Each precision's roof and the dots it judges share a colour (a 16-bit kernel above the fp32
// roof is under its own, the 16-bit one); a kernel with flops of two widths takes its first's.
const ROOF_COLORS = ["#1d4ed8", "#c2410c", "#047857", "#7e22ce", "#be123c", "#0e7490"];
const roofKinds = [...new Set(D.roofline.roofs.map(r => r.kind).concat(D.roofline.points.map(p => p.roof.split(", ")[0])))];
const roofColor = kind => ROOF_COLORS[Math.max(0, roofKinds.indexOf(kind.split(", ")[0])) % ROOF_COLORS.length];
const TOP_LABELS = 5;  // the kernels of most time get their names beside their dots
let measureBold = null;
function textWidth(text) {
  if (!measureBold) { measureBold = document.createElement("canvas").getContext("2d"); measureBold.font = "600 " + FONT; }
  return measureBold.measureText(text).width;
}
function roofline() {
  const R = D.roofline, svg = $("roofsvg"), canvas = $("roofdots");
  $("roofnote").textContent = R.note + (R.points.length ? " Hover a dot for its kernel; click a row of the kernels table to mark it here." : "");
  $("roofplot").style.display = R.points.length ? "inline-block" : "none";
  if (!R.points.length) return;
  const used = [...new Set(R.points.map(p => p.roof))], srcs = new Set(R.points.map(p => p.src));
  // where a point comes from, when any was measured: filled (counters), hollow (declared),
  // a square (counters, no tensor work: at a nominal intensity, under the memory roof by its
  // measured DRAM bandwidth fraction)
  const marks = srcs.has("measured") || srcs.has("no tensor work") ? [
    ["measured", "circle", "measured by hardware counters"],
    ["declared", "hollow", "declared by launch_metadata"],
    ["no tensor work", "square", "no tensor work: placed at a nominal intensity (" + P.nominal +
     " FLOP/byte); its distance to the memory roof (DRAM solid, L2 dashed) is its measured bandwidth fraction there"]].filter(([s]) => srcs.has(s)) : [];
  $("roofkey").innerHTML = used.map(k => '<span class="key"><i style="background:' + roofColor(k) + '"></i>' +
    esc(k) + " kernels, judged by the " + esc(k.split(", ")[0]) + " roof</span>").join("") +
    marks.map(([s, shape, text]) => '<span class="key mark" data-src="' + esc(s) + '"><b class="' + shape + '"></b>' + esc(text) + "</span>").join("");
  const W = Math.max(640, Math.min(1100, $("roofline").clientWidth - 34));
  const H = Math.round(Math.max(300, Math.min(W * 0.58, innerHeight - $("roofplot").getBoundingClientRect().top - 12)));
  const L = 64, B = 44, T = 14, RR = 16, n = R.points.length;
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  let xlo = Number.MAX_VALUE, xhi = 0, ylo = Number.MAX_VALUE, yhi = 0, tmax = 0;  // all positive
  for (const p of R.points) { xlo = Math.min(xlo, p.x); xhi = Math.max(xhi, p.x); ylo = Math.min(ylo, p.y); yhi = Math.max(yhi, p.y); tmax = Math.max(tmax, p.t); }
  for (const r of R.roofs) { xlo = Math.min(xlo, r.ridge); xhi = Math.max(xhi, r.ridge); yhi = Math.max(yhi, r.peak); }
  const x0 = Math.floor(Math.log10(xlo)) - 0.3, x1 = Math.ceil(Math.log10(xhi)) + 0.3;
  const y0 = Math.floor(Math.log10(ylo)) - 0.3, y1 = Math.log10(yhi) + 0.45;
  const X = v => L + (Math.log10(v) - x0) / (x1 - x0) * (W - L - RR);
  const Y = v => H - B - (Math.log10(v) - y0) / (y1 - y0) * (H - B - T);
  const out = ['<clipPath id="plotarea"><rect x="' + L + '" y="' + T + '" width="' + (W - L - RR) + '" height="' + (H - B - T) + '"/></clipPath>'];
  for (let e = Math.ceil(x0); e <= x1; e++) out.push('<line x1="' + X(10 ** e) + '" x2="' + X(10 ** e) + '" y1="' + T + '" y2="' + (H - B) +
    '" stroke="#eef0f3"/><text class="tick x" x="' + X(10 ** e) + '" y="' + (H - B + 16) + '" text-anchor="middle">' + si(e) + "</text>");
  for (let e = Math.ceil(y0); e <= y1; e++) out.push('<line x1="' + L + '" x2="' + (W - RR) + '" y1="' + Y(10 ** e) + '" y2="' + Y(10 ** e) +
    '" stroke="#eef0f3"/><text class="tick y" x="' + (L - 6) + '" y="' + (Y(10 ** e) + 4) + '" text-anchor="end">' + si(e) + "</text>");
  // the dots: biggest first, so small ones stay visible on top; a grid of them for hovering
  DOT.x = new Float32Array(n); DOT.y = new Float32Array(n); DOT.r = new Float32Array(n);
  DOT.cols = Math.ceil(W / DOT.cell); DOT.grid = new Map();
  const order = new Int32Array(n).map((_, k) => k).sort((a, b) => R.points[b].t - R.points[a].t);
  const ratio = window.devicePixelRatio || 1, ctx = canvas.getContext("2d");
  canvas.width = W * ratio; canvas.height = H * ratio; canvas.style.width = W + "px"; canvas.style.height = H + "px";
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.lineWidth = 0.8; ctx.globalAlpha = 1;
  const marksShown = marks.length > 0;
  for (const k of order) {
    const p = R.points[k], x = X(p.x), y = Y(p.y), r = 2.5 + 12 * Math.sqrt(p.t / tmax);
    DOT.x[k] = x; DOT.y[k] = y; DOT.r[k] = r;
    ctx.beginPath();
    if (p.src === "no tensor work") ctx.rect(x - r * 0.89, y - r * 0.89, r * 1.78, r * 1.78);  // a square of the circle's area
    else ctx.arc(x, y, r, 0, 2 * Math.PI);
    ctx.fillStyle = roofColor(p.roof); ctx.strokeStyle = roofColor(p.roof);
    // measured: filled; declared: hollow (a faint fill, so a dot's colour still reads)
    ctx.globalAlpha = p.src === "declared" && marksShown ? 0.12 : p.src === "declared" ? 0.5 : 0.75;
    ctx.fill(); ctx.globalAlpha = 1; ctx.lineWidth = p.src === "declared" && marksShown ? 1.6 : 0.8; ctx.stroke();
    const c = Math.floor(y / DOT.cell) * DOT.cols + Math.floor(x / DOT.cell);
    (DOT.grid.get(c) || DOT.grid.set(c, []).get(c)).push(k);
  }
  canvas.dataset.dots = n;
  for (const r of R.roofs) {
    const a = 10 ** x0, b = 10 ** x1;
    // a memory level's roof under the same compute peak: DRAM solid, L2 dashed (hierarchical)
    out.push('<polyline class="roof" data-kind="' + esc(r.kind) + '" data-level="' + esc(r.level || "DRAM") +
      '" clip-path="url(#plotarea)" fill="none" stroke="' + roofColor(r.kind) +
      (r.level === "L2" ? '" stroke-dasharray="6 4' : "") + '" stroke-width="2" points="' + [[a, Math.min(r.peak, r.bw * a)], [r.ridge, r.peak], [b, r.peak]].map(([x, y]) =>
      X(x).toFixed(1) + "," + Y(y).toFixed(1)).join(" ") + '"/>');
  }
  // the marked kernel's dots, then every label (a white halo), above the dots; no label over
  // another: the roofs' first, then the marked kernel's, then the top kernels' where one fits
  const marked = S.kernel >= 0 ? pointsOf[S.kernel] : [], labels = [], boxes = [];
  const free = b => b.x0 >= L && b.x1 <= W - RR && b.y0 >= 0 && b.y1 <= H - B &&
    !boxes.some(o => b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1);
  const halo = '" paint-order="stroke" stroke="#fff" stroke-width="4" stroke-linejoin="round"';
  for (const k of marked) out.push('<circle class="sel" data-k="' + k + '" cx="' + DOT.x[k].toFixed(1) + '" cy="' +
    DOT.y[k].toFixed(1) + '" r="' + Math.max(5, DOT.r[k]).toFixed(1) + '"/>');
  for (const r of R.roofs) {
    const w = textWidth(r.label), x1 = W - RR - 4;
    let y = Y(r.peak) - 7;
    while (!free({x0: x1 - w, x1, y0: y - 11, y1: y + 3}) && y > 12) y -= 14;
    boxes.push({x0: x1 - w, x1, y0: y - 11, y1: y + 3});
    labels.push('<text class="rooflabel" x="' + x1 + '" y="' + y.toFixed(1) + '" text-anchor="end" style="fill:' + roofColor(r.kind) + halo + ">" + esc(r.label) + "</text>");
  }
  const byTime = order.slice(0, TOP_LABELS).filter(k => !marked.includes(k));
  for (const k of [...marked, ...byTime]) {
    const name = pointName(k), w = textWidth(name), x = DOT.x[k], y = DOT.y[k], gap = DOT.r[k] + 5;
    const spots = [[x + gap, y + 4, "start"], [x - gap, y + 4, "end"], [x - w / 2, y - gap - 2, "start"],
                   [x - w / 2, y + gap + 11, "start"], [x + gap, y - gap, "start"], [x - gap, y - gap, "end"],
                   [x + gap, y + gap + 8, "start"], [x - gap, y + gap + 8, "end"]];
    const spot = spots.find(([sx, sy, a]) => free({x0: a === "end" ? sx - w : sx, x1: a === "end" ? sx : sx + w, y0: sy - 11, y1: sy + 3}));
    if (!spot) continue;  // no room: its name is on hover
    const [sx, sy, a] = spot;
    boxes.push({x0: a === "end" ? sx - w : sx, x1: a === "end" ? sx : sx + w, y0: sy - 11, y1: sy + 3});
    labels.push('<text class="pointlabel' + (marked.includes(k) ? " sel" : "") + '" data-k="' + k + '" x="' + sx.toFixed(1) + '" y="' + sy.toFixed(1) +
      '" text-anchor="' + a + halo + ">" + esc(name) + "</text>");
  }
  out.push('<text class="axis" x="' + (L + (W - L - RR) / 2) + '" y="' + (H - 8) + '" text-anchor="middle">arithmetic intensity, FLOP per byte</text>');
  out.push('<text class="axis" transform="translate(14,' + ((H - B + T) / 2) + ') rotate(-90)" text-anchor="middle">achieved FLOP/s</text>');
  svg.innerHTML = out.join("") + labels.join("");
}
const pointName = k => { const p = D.roofline.points[k]; return p.i >= 0 ? NAME[p.i] : p.name; };
function dotAt(e) {  // the smallest dot under the mouse (small dots are drawn on top)
  if (!DOT.grid) return -1;
  const b = $("roofsvg").getBoundingClientRect(), x = e.clientX - b.left, y = e.clientY - b.top;
  const cx = Math.floor(x / DOT.cell), cy = Math.floor(y / DOT.cell);
  let best = -1;
  for (let j = cy - 1; j <= cy + 1; j++) for (let i = cx - 1; i <= cx + 1; i++) {
    if (i < 0 || i >= DOT.cols) continue;
    for (const k of DOT.grid.get(j * DOT.cols + i) || [])
      if ((DOT.x[k] - x) ** 2 + (DOT.y[k] - y) ** 2 <= (DOT.r[k] + 1) ** 2 && (best < 0 || DOT.r[k] < DOT.r[best])) best = k;
  }
  return best;
}
$("roofsvg").onmousemove = e => {
  const k = dotAt(e);
  $("roofsvg").style.cursor = k < 0 ? "" : "pointer";
  if (k < 0) { hideTip(); return; }
  const p = D.roofline.points[k], from = {measured: "hardware counters (measured)", declared: "launch_metadata (declared)",
    "no tensor work": "hardware counters; no tensor work: placed at a nominal intensity, its distance to the memory roof is its measured DRAM bandwidth fraction"}[p.src];
  // measured: each memory level against its own roof (hierarchical roofline), the nearest first
  const levels = p.levels ? Object.entries(p.levels).sort((a, b) => b[1] - a[1]).map(([l, f]) =>
    "<tr><td>" + esc(l) + " of its roof</td><td>" + fmt(f * 100) + "%</td></tr>").join("") : "";
  const rows = p.src === "no tensor work" ?
    "<tr><td>" + esc(p.lv) + "</td><td>" + fmt(p.y / p.x / 1e9) + " GB/s</td></tr><tr><td>time</td><td>" + withUnit(p.t * 1e3, "time (ms)") + "</td></tr>" + (levels ||
    (p.frac === null ? "" : "<tr><td>of the DRAM bandwidth</td><td>" + fmt(p.frac * 100) + "%</td></tr>")) :
    "<tr><td>achieved</td><td>" + fmt(p.y / 1e12) + " TFLOP/s</td></tr><tr><td>intensity (" + esc(p.lv) + ")</td><td>" +
    fmt(p.x) + " FLOP/byte</td></tr><tr><td>time</td><td>" + withUnit(p.t * 1e3, "time (ms)") + "</td></tr>" + levels + (p.frac === null ? "" :
    "<tr><td>of its nearest roof</td><td>" + fmt(p.frac * 100) + "%</td></tr>");
  tipAt(e, "<b>" + esc(pointName(k)) + "</b><table>" + rows + "<tr><td>from</td><td>" + esc(from) + "</td></tr></table>");
};
$("roofsvg").onmouseleave = hideTip;
$("roofsvg").onclick = e => {  // a dot marks its kernel (also in the table); elsewhere unmarks
  const k = dotAt(e);
  S.kernel = k < 0 ? -1 : D.roofline.points[k].row; roofline(); writeHash();
};

// -- source heat: the hottest line saturated; text white or dark, whichever reads ------------
function heat(level) {  // level 0..1 of the kernel's hottest line -> [background, text]
  const l = 0.97 - 0.57 * level, s = 0.8, a = s * Math.min(l, 1 - l);
  const rgb = [0, 8, 4].map(n => { const k = (n + 4 / 30) % 12; return l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1)); });
  const lum = rgb.map(c => c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
  const y = 0.2126 * lum[0] + 0.7152 * lum[1] + 0.0722 * lum[2];
  const bg = "rgb(" + rgb.map(c => Math.round(c * 255)).join(",") + ")";
  return [bg, 1.05 / (y + 0.05) > (y + 0.05) / 0.0566 ? "#fff" : "#111"];
}
function source() {
  if (!D.source.length) { $("srcbody").innerHTML = '<p class="note">No PC samples in this profile: profile with <code>proton -m pcsampling</code> to see each kernel\u2019s source lines by samples and stall reasons.</p>'; return; }
  $("srcbody").innerHTML = D.source.map((k, j) => {
    const top = Math.max(...k.files.flatMap(f => f.lines.map(l => l.share || 0)), 1e-9);
    return '<div class="srckernel' + (S.focus === k.name ? " focus" : "") + '" id="src-' + j + '"><h3>' + esc(k.name) + "</h3>" +
      '<p class="note">' + esc(k.headline) + " " + (kernelFrame(k.name) >= 0 ? link({view: "flame", zoom: kernelFrame(k.name)}, "flame graph") : "") + "</p>" +
      k.files.map(f => '<p class="srcfile">' + esc(f.path) + ' <span class="note">' + fmt(100 * f.samples) + "% of the kernel\u2019s samples</span></p>" +
        (f.missing ? '<div class="missing">' + esc(f.missing) + "</div>" : "") +
        '<table class="src"><thead><tr><th class="s">samples</th><th class="p">%</th><th class="r">top stalls</th><th class="n">line</th>' +
        (f.missing ? "" : '<th class="code">source</th>') + "</tr></thead><tbody>" + f.lines.map(l => {
          if (l.line === null) return '<tr class="gap"><td colspan="' + (f.missing ? 4 : 5) + '">\u22ef</td></tr>';
          const code = f.missing ? "" : "<td>" + esc(l.code) + "</td>";
          if (!l.samples) return '<tr class="cold"><td class="s"></td><td class="p"></td><td class="r"></td><td class="n">' + l.line + "</td>" + code + "</tr>";
          const [bg, ink] = heat(l.share / top), style = ' style="background:' + bg + ";color:" + ink + '"';
          return "<tr" + (l.share === top ? ' class="hot"' : "") + '><td class="s"' + style + ">" + num(l.samples, 0) +
            '</td><td class="p"' + style + ">" + (100 * l.share).toFixed(1) + '%</td><td class="r"' + style + ">" + esc(l.stalls) +
            '</td><td class="n"' + style + ">" + l.line + "</td>" + code + "</tr>";
        }).join("") + "</tbody></table>").join("") + "</div>";
  }).join("");
  const at = D.source.findIndex(k => k.name === S.focus);
  if (at >= 0) $("src-" + at).scrollIntoView({block: "start"});
}
function kernelFrame(name) {  // the hottest frame of the kernel of that name
  const j = ROWS.findIndex(r => NAME[r[0][0]] === name);
  return j >= 0 ? ROWS[j][0][0] : -1;
}

// -- findings (proton-viewer --diagnose), each linked to its kernel -------------------------
// A card per kernel (or scope), most to gain first: what fixing it could save, its time, and a
// row per finding with what to try; info (worth knowing, not a problem) greyed, last.
const msText = ns => num(ns / 1e6, placesOf("time (ms)") ?? 3) + " ms";  // as the time (ms) column writes it
function findings() {
  const F = D.findings, items = F.items;
  const card = (g, n) => {
    const first = items[g.findings[0]], paths = [...new Set(g.findings.map(i => items[i].path))];
    const go = [first.node !== null ? link({view: "flame", zoom: first.node}, "flame graph") : "",
                first.source ? link({view: "source", kernel: first.kernel}, "source") : ""].join("");
    const head = '<div class="fhead"><span class="rank">' + n + '</span><b>' + wrappable(g.kernel) + "</b>" + go +
      '<span class="gain">' + (g.headline ? esc(g.headline) :  // a leak: what it costs in memory
        g.saves_ns > 0 ? "could save up to " + msText(g.saves_ns) +
        (g.inside_ns > 0 ? " besides the " + msText(g.inside_ns) + " the findings inside it claim" : "") : "worth knowing") + "</span></div>" +
      '<div class="note">' + (g.wall_ns ? msText(g.wall_ns) + " of wall time, " : "") + msText(g.time_ns) + " of GPU time (" +
        (g.share > 0 && g.share < 0.005 ? "<1" : Math.round(100 * g.share)) + "% of the profile\u2019s)" +
      (paths.length === 1 ? " \u00b7 at " + esc(paths[0]) : "") + "</div>";
    return '<li class="finding' + (g.info ? " info" : "") + '">' + head + '<table class="ftable"><tbody>' + g.findings.map(i => {
      const f = items[i];
      return '<tr class="' + (f.info ? "info" : "") + '"><td class="rule">' + esc(f.rule) + (f.info ? ' <span class="tag">info</span>' : "") +
        '</td><td>' + esc(f.evidence) + (paths.length > 1 ? ' <span class="note">(at ' + esc(f.path) + ")</span>" : "") +
        '<div class="try"><i>try:</i> ' + esc(f.advice) + "</div></td></tr>";
    }).join("") + "</tbody></table></li>";
  };
  $("findbody").innerHTML = (F.groups.length ? '<p class="note">' + F.groups.length + " kernel" + (F.groups.length === 1 ? "" : "s") +
    " and scopes with findings, most to gain first: what fixing it could save of the run\u2019s wall time at most (a kernel at its roof, every SM busy; a launch-bound scope\u2019s idle GPU), less what the findings inside the same frame claim. " +
    "GPU time: what ran on the GPU (kernels, copies, sets), a scope\u2019s what ran under it; " + msText(F.gpu_time_ns || 0) + " in all, the whole each share is of.</p>" +
    '<ol class="findings">' + F.groups.map((g, n) => card(g, n + 1)).join("") + "</ol>" :
    '<p class="note">No findings from the rules that ran: ' + esc(F.rules_run.join(", ") || "none") + ".</p>") +
    F.notes.map(n => '<p class="note">' + esc(n) + "</p>").join("");
}

// -- warps: one kernel launch inside, a row per CTA (sorted by SM), a lane per warp ----------
// Each warp's pass through a scope is a span, coloured by scope; nested scopes sit in bands
// below their parents within the lane. x: ns from the launch's first CTA (%globaltimer plus
// cycles at the device's clock). Hover a span for its cycles.
// cta: the one CTA zoomed into (null: all); win: the time window [ns, ns] zoomed into in it
const WARP = {k: 0, lanes: null, cta: null, win: null};
const scopeColor = (t, j) => "hsl(" + Math.round(j * 360 / Math.max(1, t.scopes.length) + 200) % 360 + ",62%,52%)";
function warps() {
  const T = D.warps[WARP.k], n = T.cycles.length;
  $("warpnote").textContent = "Inside the kernel (proton.language scopes): each kernel's latest launch, a row per CTA " +
    "(on its SM), a lane per warp, each warp's pass through a scope as a span coloured by scope. Hover a span for its cycles; " +
    "click a span (or a CTA's name) to zoom into its CTA, and a span there to zoom into its time.";
  const pick = D.warps.length > 1 ? '<select id="warpkernel">' + D.warps.map((w, j) => '<option value="' + j + '"' +
    (j === WARP.k ? " selected" : "") + ">" + esc(w.kernel) + (w.path ? " (" + esc(w.path) + ")" : "") + "</option>").join("") +
    "</select>" : "<b>" + esc(T.kernel) + "</b>" + (T.path ? ' <span class="note">' + esc(T.path) + "</span>" : "");
  $("warpbar").innerHTML = pick + T.scopes.map((s, j) => '<span class="key"><i style="background:' + scopeColor(T, j) +
    '"></i>' + esc(s) + "</span>").join("");
  if ($("warpkernel")) $("warpkernel").onchange = e => { WARP.k = +e.target.value; WARP.cta = WARP.win = null; warps(); writeHash(); };
  const bands = Math.min(MAX_BANDS, 1 + T.scopes.reduce((m, s) => Math.max(m, s.split(" > ").length - 1), 0));
  const depth = T.scopes.map(s => Math.min(bands - 1, s.split(" > ").length - 1));
  const BAND0 = 7, ROWH0 = T.warps * (bands * BAND0 + 2) + 8;
  const drawn = ctaRows(T, Math.max(1, Math.min(MAX_CTA_ROWS, Math.floor(MAX_HEIGHT / ROWH0)))), all = drawn.rows;
  if (drawn.total > all.length) $("warpnote").textContent += " The first " + all.length.toLocaleString("en-US") +
    " of " + drawn.total.toLocaleString("en-US") + " CTAs (by SM) are drawn.";
  // zoomed into one CTA: its rows alone, taller bands, the time axis from its first span to its last
  const one = all.find(c => c.c === WARP.cta), ctas = one ? [one] : all;
  $("warpbar").insertAdjacentHTML("beforeend", '<select id="warpcta" aria-label="CTA"><option value="">all CTAs</option>' +
    all.map(c => '<option value="' + c.c + '"' + (one && one.c === c.c ? " selected" : "") + ">CTA " + c.c + " (SM " + c.sm + ")</option>").join("") + "</select>");
  $("warpcta").onchange = e => { WARP.cta = e.target.value === "" ? null : +e.target.value; WARP.win = null; warps(); };
  const rowOfCta = new Map(ctas.map((c, r) => [c.c, r]));
  const BAND = one ? 18 : BAND0, LANE = bands * BAND + 2, ROWGAP = 8, ROWH = T.warps * LANE + ROWGAP, L = 110, RR = 16, TOP = 24;
  const W = Math.max(640, Math.min(1400, $("warps").clientWidth - 34)), H = TOP + ctas.length * ROWH + 4;
  let t0 = one ? Number.MAX_VALUE : 0, t1 = 0;
  for (let i = 0; i < n; i++) if (!one || T.cta[i] === one.c) {
    t0 = Math.min(t0, T.start_ns[i]); t1 = Math.max(t1, T.start_ns[i] + T.cycles[i] * 1e6 / T.clock_khz);
  }
  if (one && WARP.win) [t0, t1] = WARP.win;
  const X = v => L + (v - t0) / ((t1 - t0) || 1) * (W - L - RR);
  const canvas = $("warpspans"), svg = $("warpsvg"), ratio = window.devicePixelRatio || 1, ctx = canvas.getContext("2d");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  canvas.width = W * ratio; canvas.height = H * ratio; canvas.style.width = W + "px"; canvas.style.height = H + "px";
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.save(); ctx.beginPath(); ctx.rect(L, 0, W - L - RR, H); ctx.clip();  // a time window cuts spans
  WARP.lanes = new Map(); WARP.geo = {L, TOP, ROWH, LANE, BAND, X, depth};
  for (let i = 0; i < n; i++) {
    const r = rowOfCta.get(T.cta[i]);
    if (r === undefined) continue;  // a CTA not drawn
    const y = TOP + r * ROWH + T.warp[i] * LANE + depth[T.scope[i]] * BAND;
    const x0 = X(T.start_ns[i]), x1 = X(T.start_ns[i] + T.cycles[i] * 1e6 / T.clock_khz);
    ctx.fillStyle = scopeColor(T, T.scope[i]);
    ctx.fillRect(x0, y + 1, Math.max(1, x1 - x0), BAND - 1);
    const key = r * T.warps + T.warp[i];
    (WARP.lanes.get(key) || WARP.lanes.set(key, []).get(key)).push(i);
  }
  ctx.restore();
  canvas.dataset.spans = one ? T.cta.filter(c => c === one.c).length : n;
  const out = [];
  for (const v of axisTicks(t1, t0)) out.push('<line x1="' + X(v) + '" x2="' + X(v) + '" y1="' + (TOP - 4) + '" y2="' + H +
    '" stroke="#eef0f3"/><text class="tick" x="' + X(v) + '" y="' + (TOP - 8) + '" text-anchor="middle">' + nsText(v) + "</text>");
  ctas.forEach((c, r) => {
    const y = TOP + r * ROWH;
    out.push('<text class="cta" data-cta="' + c.c + '" x="6" y="' + (y + 10) + '">CTA ' + c.c + '</text><text x="6" y="' + (y + 22) + '">SM ' + c.sm + "</text>" +
      (one ? '<text class="back" data-cta="" x="6" y="' + (y + 40) + '">\u2190 all CTAs</text>' : "") +
      (one && WARP.win ? '<text class="back" data-cta="' + c.c + '" data-whole="1" x="6" y="' + (y + 56) + '">\u2190 whole launch</text>' : ""));
    if (r) out.push('<line x1="0" x2="' + W + '" y1="' + (y - ROWGAP / 2) + '" y2="' + (y - ROWGAP / 2) + '" stroke="#e5e8ec"/>');
    for (let w = 0; w < T.warps; w++) out.push('<text x="' + (L - 6) + '" y="' + (y + w * LANE + LANE - 2) +
      '" text-anchor="end" font-size="9">w' + w + "</text>");
  });
  svg.innerHTML = out.join("");
}
// -- bounded helpers (tests/test_viewer_bombs.py runs this block in node) ----------------------
const MAX_CTA_ROWS = 512, MAX_HEIGHT = 30000, MAX_BANDS = 16;
/* The warps tab's rows: at most MAX_CTA_ROWS CTAs, MAX_HEIGHT pixels, MAX_BANDS nesting levels. */
function niceStep(raw) {
  const e = 10 ** Math.floor(Math.log10(raw || 1)), f = raw / e;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * e;
}
function axisTicks(t1, t0 = 0) {  // at most 11 ticks from t0 to t1 (a step that does not advance, or an infinite end, cannot loop)
  if (!(t1 > t0 && isFinite(t1) && isFinite(t0))) return [t0];
  const step = niceStep((t1 - t0) / 8), first = Math.ceil(t0 / step) * step, out = [];
  for (let k = 0; k <= 10 && first + k * step <= t1; k++) out.push(first + k * step);
  return out;
}
function ctaRows(T, most) {  // the first `most` CTAs by SM, then CTA, each with the SM of its first event: one pass
  const smOf = new Map();
  for (let i = 0; i < T.cta.length; i++) if (!smOf.has(T.cta[i])) smOf.set(T.cta[i], T.sm[i]);
  const all = [...smOf].map(([c, sm]) => ({c, sm})).sort((a, b) => a.sm - b.sm || a.c - b.c);
  return {rows: all.slice(0, most), total: all.length};
}
const PLAIN_REGEX = /^(?:[^\\()*+?{}]|\\.)*$/;
/* A search: a regular expression when it has no group and no repetition, so a match takes time
   linear in the name (a link's #search=(a+)+$ cannot hang the page); any other as plain text. */
function searchPattern(text) {
  if (!text) return null;
  if (PLAIN_REGEX.test(text)) { try { return new RegExp(text, "i"); } catch (err) { /* as text */ } }
  const low = text.toLowerCase();
  return {test: s => s.toLowerCase().includes(low)};
}
// -- end of bounded helpers ----------------------------------------------------------------------
const nsText = v => v >= 1e6 ? fmt(v / 1e6) + " ms" : v >= 1e3 ? fmt(v / 1e3) + " \u00b5s" : fmt(v) + " ns";
function spanAt(e) {  // the innermost span under the mouse
  const T = D.warps[WARP.k], g = WARP.geo;
  if (!g) return -1;
  const b = $("warpsvg").getBoundingClientRect(), x = e.clientX - b.left, y = e.clientY - b.top - g.TOP;
  if (y < 0 || x < g.L) return -1;
  const r = Math.floor(y / g.ROWH), w = Math.floor((y - r * g.ROWH) / g.LANE);
  if (w >= T.warps) return -1;
  const band = Math.floor((y - r * g.ROWH - w * g.LANE) / g.BAND);
  let best = -1;
  for (const i of WARP.lanes.get(r * T.warps + w) || []) {
    const x0 = g.X(T.start_ns[i]), x1 = Math.max(x0 + 1, g.X(T.start_ns[i] + T.cycles[i] * 1e6 / T.clock_khz));
    if (x0 - 1 <= x && x <= x1 + 1 && g.depth[T.scope[i]] === band) best = i;
  }
  return best;
}
$("warpsvg").onmousemove = e => {
  const i = spanAt(e), T = D.warps[WARP.k];
  if (i < 0) { hideTip(); return; }
  tipAt(e, "<b>" + esc(T.scopes[T.scope[i]]) + "</b><table><tr><td>cycles</td><td>" + fmt(T.cycles[i]) +
    "</td></tr><tr><td>time</td><td>" + nsText(T.cycles[i] * 1e6 / T.clock_khz) + "</td></tr><tr><td>starts at</td><td>" +
    nsText(T.start_ns[i]) + "</td></tr><tr><td>CTA · SM · warp</td><td>" + T.cta[i] + " · " + T.sm[i] + " · " + T.warp[i] +
    "</td></tr></table>");
};
$("warpsvg").onmouseleave = hideTip;
$("warpsvg").onclick = e => {
  const c = e.target.dataset.cta, T = D.warps[WARP.k];
  if (e.target.dataset.whole) WARP.win = null;  // back to the CTA's whole launch
  else if (c !== undefined) { WARP.cta = c === "" || WARP.cta === +c ? null : +c; WARP.win = null; }
  else {  // a span: into its CTA; in a CTA, into the span's time (a fifth of it either side)
    const i = spanAt(e);
    if (i < 0) return;
    if (WARP.cta === null) WARP.cta = T.cta[i];
    else {
      const a = T.start_ns[i], d = Math.max(T.cycles[i] * 1e6 / T.clock_khz, 1);
      WARP.win = [a - d / 5, a + d * 1.2];
    }
  }
  hideTip(); warps();
};

readHash();
document.body.dataset.readyMs = Math.round(performance.now());
document.body.dataset.ready = "1";
