/* msprof-agent viewer: draws the plotly specs the server computed, and adds sorting, search, tabs and
   step picking. Text from a profile is only ever written with textContent. */
(function () {
  "use strict";
  function blob(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  var charts = blob("msprof-charts") || {};
  var config = { displaylogo: false, responsive: true };

  function draw(id) {
    var el = document.getElementById("chart-" + id);
    if (!el) return;
    if (!window.Plotly) {
      el.textContent = "chart unavailable: plotly.min.js did not load (a report loads it from beside itself)";
      el.className += " missing";
      return;
    }
    Plotly.newPlot(el, charts[id].data, charts[id].layout, config);
  }
  Object.keys(charts).forEach(function (id) {
    var el = document.getElementById("chart-" + id);
    if (el && el.style.display !== "none") draw(id);
  });

  function show(el) {
    el.style.display = "";
    if (el.classList.contains("chart") && !el.classList.contains("js-plotly-plot")) draw(el.id.slice(6));
  }

  /* pie / bar toggles */
  document.querySelectorAll(".toggle").forEach(function (toggle) {
    var ids = toggle.getAttribute("data-charts").split(" ");
    var buttons = toggle.querySelectorAll("button");
    buttons.forEach(function (button, index) {
      button.addEventListener("click", function () {
        ids.forEach(function (id, j) {
          var el = document.getElementById("chart-" + id);
          if (j === index) show(el); else el.style.display = "none";
        });
        buttons.forEach(function (b, j) { b.classList.toggle("on", j === index); });
      });
    });
  });

  /* tabs */
  var tabButtons = document.querySelectorAll(".tabs button");
  function openTab(id) {
    tabButtons.forEach(function (b) {
      var on = b.getAttribute("data-tab") === id;
      b.classList.toggle("on", on);
      var panel = document.getElementById(b.getAttribute("data-tab"));
      if (panel) panel.style.display = on ? "" : "none";
    });
  }
  tabButtons.forEach(function (b) {
    b.addEventListener("click", function () { openTab(b.getAttribute("data-tab")); });
  });

  /* sortable tables: click a header; numbers by data-v, text by locale */
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.querySelectorAll("thead th");
    heads.forEach(function (th, col) {
      th.addEventListener("click", function () {
        var numeric = th.getAttribute("data-kind") === "num";
        var dir = th.getAttribute("data-dir") === "desc" ? "asc" : "desc";
        heads.forEach(function (h) { h.removeAttribute("data-dir"); });
        th.setAttribute("data-dir", dir);
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[col].getAttribute("data-v"), y = b.cells[col].getAttribute("data-v");
          var r;
          if (numeric) {
            var fx = x === "" ? -Infinity : parseFloat(x), fy = y === "" ? -Infinity : parseFloat(y);
            r = fx - fy;
          } else {
            r = x.localeCompare(y);
          }
          return dir === "asc" ? r : -r;
        });
        rows.forEach(function (row) { body.appendChild(row); });
        if (table.showPage) table.showPage(0);
      });
    });
    if (table.hasAttribute("data-page-size")) pager(table);
  });

  /* paged tables (data-page-size, the cluster's ranks; the page holds the rows past the first page hidden): a filter
     on each row's data-search, and one page of the sorted, filtered rows at a time, so a thousand ranks stay one screen */
  function pager(table) {
    var size = parseInt(table.getAttribute("data-page-size"), 10) || 50, at = 0;
    var bar = document.createElement("div"), filter = document.createElement("input"), where = document.createElement("span");
    bar.className = "pager";
    filter.type = "search";
    filter.placeholder = "filter: rank, host or slow";
    filter.setAttribute("data-filter", table.id);
    function button(text, step) {
      var b = document.createElement("button");
      b.type = "button";
      b.textContent = text;
      b.addEventListener("click", function () { table.showPage(at + step); });
      return b;
    }
    var prev = button("\u2039 previous", -1), next = button("next \u203a", 1);
    table.showPage = function (page) {
      var q = filter.value.toLowerCase().trim();
      var rows = Array.prototype.slice.call(table.tBodies[0].rows);
      var hits = rows.filter(function (row) { return !q || row.getAttribute("data-search").indexOf(q) >= 0; });
      var pages = Math.max(1, Math.ceil(hits.length / size));
      at = Math.max(0, Math.min(page, pages - 1));
      var shown = new Set(hits.slice(at * size, (at + 1) * size));
      rows.forEach(function (row) { row.hidden = !shown.has(row); });
      where.textContent = hits.length ? "rows " + (at * size + 1) + "\u2013" + Math.min((at + 1) * size, hits.length) + " of " + hits.length +
        (q ? " matching" : "") + " \u00b7 page " + (at + 1) + " of " + pages : "no row matches";
      prev.disabled = at === 0;
      next.disabled = at >= pages - 1;
    };
    filter.addEventListener("input", function () { table.showPage(0); });
    [filter, prev, where, next].forEach(function (el) { bar.appendChild(el); });
    table.parentNode.insertBefore(bar, table);
    table.showPage(0);
  }

  /* fuzzy search: every character of the query, in order, somewhere in the op's name or type */
  function fuzzy(query, text) {
    var i = 0;
    for (var j = 0; j < text.length && i < query.length; j++) {
      if (text.charAt(j) === query.charAt(i)) i++;
    }
    return i === query.length;
  }
  var search = document.getElementById("op-search");
  /* a clicked type row lists exactly that type's ops (as in MindInsight); typing goes back to the fuzzy search */
  var exactType = null;
  function filter() {
    var q = search.value.toLowerCase().replace(/\s+/g, "");
    var shown = 0, total = 0;
    document.querySelectorAll("#op-types tbody tr, #op-detail tbody tr").forEach(function (row) {
      var detail = row.closest("#op-detail");
      var hit;
      if (exactType !== null) {
        var cell = detail ? row.querySelector("td[data-col=op_type]") : null;
        hit = !detail || (cell !== null && cell.getAttribute("data-v") === exactType);
      } else {
        hit = fuzzy(q, row.getAttribute("data-search").replace(/\s+/g, ""));
      }
      row.style.display = hit ? "" : "none";
      if (detail) { total++; if (hit) shown++; }
    });
    var count = document.getElementById("op-count");
    if (count) {
      count.textContent = exactType !== null ? shown + " of " + total + " operators of type " + exactType
        : q ? shown + " of " + total + " operators match" : "";
    }
  }
  if (search) {
    search.addEventListener("input", function () { exactType = null; filter(); });
    document.querySelectorAll("#op-types tbody tr").forEach(function (row) {
      row.addEventListener("click", function () {
        exactType = row.cells[0].getAttribute("data-v");
        search.value = exactType;
        filter();
        openTab("tab-ops");
      });
    });
  }

  /* step picker: one step or the average */
  var steps = blob("msprof-steps");
  var pick = document.getElementById("step-pick");
  function fmt(v) { return v === null || v === undefined ? "\u2014" : v.toFixed(3); }
  if (steps && pick) {
    pick.addEventListener("change", function () {
      var row = steps.average, label = pick.options[0].text;
      if (pick.value !== "avg") {
        var n = parseInt(pick.value, 10);
        row = steps.steps.filter(function (s) { return s.step === n; })[0];
        label = "Step " + n;
      }
      ["iteration_interval", "fp_and_bp", "tail", "total"].forEach(function (k) {
        document.getElementById("st-" + k).textContent = fmt(row[k]);
      });
      var avg = pick.value === "avg";
      document.getElementById("st-start").textContent = avg ? "\u2014" : fmt(row.start_offset);
      document.getElementById("st-end").textContent = avg ? "\u2014" : fmt(row.end_offset);
      var fpAt = avg ? row.iteration_interval : row.fp_offset;
      var bpAt = avg ? (row.iteration_interval === null ? null : row.iteration_interval + row.fp_and_bp) : row.bp_offset;
      document.getElementById("st-fp").textContent = fmt(fpAt);
      document.getElementById("st-bp").textContent = fmt(bpAt);
      var el = document.getElementById("chart-st-bar");
      if (window.Plotly && el && charts["st-bar"]) {
        var spec = charts["st-bar"];
        var keys = ["iteration_interval", "fp_and_bp", "tail"];
        var names = ["Step interval", "Forward + backward", "Step tail"];
        var data = spec.data.map(function (trace) {
          var k = keys[names.indexOf(trace.name)];
          var v = row[k] || 0;
          return Object.assign({}, trace, { x: [v], text: [trace.name + " " + v.toFixed(3) + " ms"] });
        });
        var layout = Object.assign({}, spec.layout, { title: { text: label } });
        Plotly.react(el, data, layout, config);
      }
    });
  }
  /* steps a finding links to (#steps=3-5,9): shaded on the per-step chart, named above it, the first one picked */
  function stepList(text) {
    var numbers = [];
    text.split(",").forEach(function (part) {
      var ends = part.split("-").map(function (n) { return parseInt(n, 10); });
      for (var n = ends[0]; n <= ends[ends.length - 1] && numbers.length < 10000; n++) numbers.push(n);
    });
    return numbers;
  }
  function highlightSteps() {
    var match = /^#steps=([0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*)$/.exec(window.location.hash);
    var el = document.getElementById("chart-st-steps"), note = document.getElementById("step-highlight");
    if (!match || !el || !note) return;
    var numbers = stepList(match[1]);
    note.textContent = "Highlighted from a finding: step " + match[1].split(",").join(", ");
    note.hidden = false;
    if (window.Plotly && el.layout) {
      var shapes = (el.layout.shapes || []).filter(function (s) { return s.name !== "highlight"; });
      numbers.forEach(function (n) {
        shapes.push({ type: "rect", name: "highlight", xref: "x", yref: "paper", x0: n - 0.5, x1: n + 0.5, y0: 0, y1: 1,
                      fillcolor: "#f5b700", opacity: 0.45, line: { width: 0 }, layer: "below" });
      });
      Plotly.relayout(el, { shapes: shapes });
    }
    if (pick && pick.querySelector("option[value='" + numbers[0] + "']")) {
      pick.value = String(numbers[0]);
      pick.dispatchEvent(new Event("change"));
    }
    (el.closest("section") || note).scrollIntoView();
  }
  highlightSteps();
  window.addEventListener("hashchange", highlightSteps);
  /* a report page shown by its link was hidden when its charts were drawn: fit them to it now */
  window.addEventListener("hashchange", function () {
    if (!window.Plotly) return;
    document.querySelectorAll(".report-page:target .js-plotly-plot").forEach(function (el) { Plotly.Plots.resize(el); });
  });
  document.body.setAttribute("data-ready", "1");
})();
