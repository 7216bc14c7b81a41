"""The inline CSS and JavaScript of ``catcap report`` (kept here so the page needs no network
and the package no data files).

The script reads the metric names from ``#report-meta`` and each row's per-image differences
B - A from its ``data-diffs`` attribute (one number per metric, in the same order). A sort
button (``data-metric``, ``data-order`` = ``b`` | ``a`` | ``abs``) orders the rows by B - A
descending, ascending, or by |B - A| descending; ties keep the original order. The filter box
keeps rows whose text contains every word typed; the "show" selector keeps rows where B is
better, A is better or both are equal on the chosen metric ("equal": the difference prints as
0.0000, under ``meta.zero``, as the page colours it grey).

The filter bar sticks to the top of the window while the rows scroll; the table's header row
sticks right under it (its offset is the bar's height, measured by the script and on resize),
so the column names stay readable and nothing covers them.
"""

REPORT_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.2em 1.6em;
       color: #1d2329; background: #fafbfc; }
h1 { font-size: 1.5em; margin: 0 0 .2em; }
h1 .vs { color: #8a949e; font-weight: normal; font-size: .8em; }
.meta, .note { color: #5b6670; font-size: .9em; margin: .3em 0; }
code { font-size: .92em; background: #eef1f4; padding: 0 .25em; border-radius: 3px; }
table { border-collapse: collapse; background: #fff; }
#summary { margin: .8em 0 .3em; box-shadow: 0 1px 2px rgba(0,0,0,.08); }
#summary th, #summary td { padding: .3em .7em; border-bottom: 1px solid #e3e7eb; text-align: right;
                           white-space: nowrap; }
#summary th:first-child, #summary td:first-child, #summary th:last-child { text-align: left; }
#summary td.buttons { text-align: left; }
#summary tr.sig td { font-weight: 600; }
#summary tr.sig td.buttons { font-weight: normal; }
button { font: inherit; font-size: .85em; padding: .15em .55em; border: 1px solid #c4ccd4; border-radius: 4px;
         background: #f4f6f8; cursor: pointer; }
button:hover { background: #e6ebf0; }
button.active { background: #2f6fb0; border-color: #2f6fb0; color: #fff; }
#controls { position: sticky; top: 0; z-index: 2; background: #fafbfc; padding: .6em 0; margin-top: .6em;
            border-bottom: 1px solid #d8dee4; }
#controls input { width: 22em; font: inherit; padding: .15em .4em; }
#controls select { font: inherit; }
#count, #sorted-by { color: #5b6670; margin-left: .6em; white-space: nowrap; }
#images { width: 100%; margin-top: .6em; box-shadow: 0 1px 2px rgba(0,0,0,.08); }
#images > thead th { text-align: left; padding: .4em .6em; background: #eef1f4; border-bottom: 2px solid #d8dee4;
                     position: sticky; top: var(--controls-height, 0px); z-index: 1; }
#images > tbody > tr > td { vertical-align: top; padding: .5em .6em; border-bottom: 1px solid #e3e7eb; }
td.pic { width: 1%; white-space: nowrap; }
td.pic img { max-width: 192px; max-height: 192px; border-radius: 3px; display: block; }
td.pic .id { color: #8a949e; font-size: .85em; margin-top: .2em; }
td.cap { font-size: 1.05em; width: 20%; }
td.cap-a { border-left: 3px solid #d9822b; }
td.cap-b { border-left: 3px solid #2f6fb0; }
td.refs { color: #4a545e; font-size: .9em; width: 26%; }
td.refs ol { margin: 0; padding-left: 1.3em; }
table.scores td, table.scores th { padding: 0 .45em; font-size: .85em; text-align: right; border: 0; }
table.scores td:first-child { text-align: left; color: #5b6670; }
.pos { color: #1a7f37; }
.neg { color: #c0392b; }
.zero { color: #8a949e; }
"""

REPORT_JS = """
(function () {
  "use strict";
  var meta = JSON.parse(document.getElementById("report-meta").textContent);
  var tbody = document.querySelector("#images tbody");
  var rows = Array.prototype.slice.call(tbody.rows);
  var names = meta.names;
  rows.forEach(function (r) {
    r.catcapDiffs = JSON.parse(r.getAttribute("data-diffs"));
    r.catcapIndex = Number(r.getAttribute("data-index"));
    r.catcapText = r.textContent.toLowerCase();
  });
  var buttons = Array.prototype.slice.call(document.querySelectorAll("button.sort"));
  var original = document.getElementById("sort-original");
  var filter = document.getElementById("filter");
  var who = document.getElementById("who");
  var whoMetric = document.getElementById("who-metric");
  var EPS = meta.zero;
  var controls = document.getElementById("controls");
  function pinHeader() {  // the header row sticks right below the sticky filter bar, never under it
    var height = Math.ceil(controls.getBoundingClientRect().height);
    document.documentElement.style.setProperty("--controls-height", height + "px");
  }
  pinHeader();
  window.addEventListener("resize", pinHeader);

  function diff(r, metric) { return r.catcapDiffs[meta.metrics.indexOf(metric)]; }

  function sortRows(metric, order) {
    var key = function (r) {
      if (!metric) { return 0; }
      var d = diff(r, metric);
      return order === "b" ? -d : (order === "a" ? d : -Math.abs(d));
    };
    var sorted = rows.slice().sort(function (x, y) {
      return (key(x) - key(y)) || (x.catcapIndex - y.catcapIndex);
    });
    sorted.forEach(function (r) { tbody.appendChild(r); });
    var label = !metric ? "" : "sorted by " + metric + ": " +
      (order === "b" ? names[1] + " better first" :
       order === "a" ? names[0] + " better first" : "largest |difference| first");
    document.getElementById("sorted-by").textContent = label;
  }

  function applyFilter() {
    var words = filter.value.toLowerCase().split(/\\s+/).filter(Boolean);
    var side = who.value, metric = whoMetric.value, shown = 0;
    rows.forEach(function (r) {
      var ok = words.every(function (w) { return r.catcapText.indexOf(w) >= 0; });
      if (ok && side !== "all") {
        var d = diff(r, metric);
        ok = side === "b" ? d >= EPS : (side === "a" ? d <= -EPS : Math.abs(d) < EPS);
      }
      r.style.display = ok ? "" : "none";
      shown += ok ? 1 : 0;
    });
    document.getElementById("count").textContent = "showing " + shown + " of " + rows.length + " images";
  }

  buttons.forEach(function (b) {
    b.addEventListener("click", function () {
      buttons.forEach(function (o) { o.classList.remove("active"); });
      b.classList.add("active");
      whoMetric.value = b.getAttribute("data-metric");
      sortRows(b.getAttribute("data-metric"), b.getAttribute("data-order"));
      applyFilter();
    });
  });
  original.addEventListener("click", function () {
    buttons.forEach(function (o) { o.classList.remove("active"); });
    sortRows(null, null);
  });
  filter.addEventListener("input", applyFilter);
  who.addEventListener("change", applyFilter);
  whoMetric.addEventListener("change", applyFilter);
  applyFilter();
})();
"""
