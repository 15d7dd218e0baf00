// Diagnostics panel, four-way table and memory timeline: jump to a step, light up the tensors a finding
// involves, and mark on the graph the parameters a cut separated from the loss (from the step of the
// cut on, while the run is stepped).
//
// Hooks into the explorer only through its public surface: AX.go(step), AX.explorer (the current
// run) and the "explorer:step" event it dispatches. Uses data-goto (not data-step, which the
// explorer's own buttons use). Never writes HTML: classes, attributes and textContent only.
(function () {
  "use strict";

  var TENSOR_ID = /^[a-z]\d+$/;
  var lit = [];

  function ax() { return window.AX || {}; }

  var t = window.AXT.t;

  // The server's unit ladder (app/units.py byte_unit, fmt_bytes).
  function fmt(n) {
    if (n < 10 * 1024) return t("{n} bytes", { n: window.AXT.number(n) });
    var units = ["KiB", "MiB", "GiB"], value = n / 1024, i = 0;
    while (Math.round(value * 10) / 10 >= 1024 && i < units.length - 1) { value /= 1024; i++; }
    return value.toFixed(1) + " " + units[i];
  }

  function highlight(run, ids) {
    lit.forEach(function (el) { el.classList.remove("diag-hl"); });
    lit = [];
    ids.forEach(function (tid) {
      if (!TENSOR_ID.test(tid)) return;
      run.querySelectorAll('[data-t="' + tid + '"]').forEach(function (el) {
        el.classList.add("diag-hl");
        lit.push(el);
      });
    });
  }

  function showFinding(item) {
    var run = item.closest('[data-role="run"]') || document;
    var step = +item.getAttribute("data-goto");
    var ids = (item.getAttribute("data-tensors") || "").split(" ").filter(Boolean);
    var explorer = run.explorer || ax().explorer; // its own run's, when two are shown (bug vs fix)
    if (explorer) explorer.go(step);
    highlight(run, ids);
    run.querySelectorAll(".diag.active").forEach(function (el) { el.classList.remove("active"); });
    item.classList.add("active");
    if (explorer && ids.length && explorer.selected !== ids[0] && explorer.select) explorer.select(ids[0]);
  }

  function timelineStep(svg, event) {
    var box = svg.getBoundingClientRect();
    var section = svg.closest('[data-role="memory-timeline"]');
    var steps = +section.getAttribute("data-steps");
    var perBar = +section.getAttribute("data-bar-steps") || 1;
    var bars = Math.ceil(steps / perBar);
    var bar = Math.floor(((event.clientX - box.left) / Math.max(box.width, 1)) * bars);
    return Math.max(0, Math.min(steps - 1, bar * perBar));
  }

  // A finding that says a parameter is never trained marks, from its step on, what the cut left
  // alone: the parameters (and the value the cut made) get .diag-cut wherever they are drawn.
  function markCuts(scope, step) {
    scope.querySelectorAll(".diag-cut").forEach(function (el) { el.classList.remove("diag-cut"); });
    scope.querySelectorAll(".diag[data-cut]").forEach(function (item) {
      if (step < +item.getAttribute("data-goto")) return;
      var run = item.closest('[data-role="run"]') || scope;
      item.getAttribute("data-cut").split(" ").forEach(function (tid) {
        if (!TENSOR_ID.test(tid)) return;
        run.querySelectorAll('[data-role="graph"] [data-t="' + tid + '"]')
          .forEach(function (el) { el.classList.add("diag-cut"); });
      });
    });
  }

  document.addEventListener("click", function (event) {
    var row = event.target.closest(".fourway-row[data-goto]");
    if (row) { showFinding(row); return; }
    var item = event.target.closest(".diag[data-goto]");
    if (item) {
      if (event.target.closest(".diag-line") || !window.getSelection().toString()) showFinding(item);
      return;
    }
    var svg = event.target.closest('[data-role="memory-timeline"] svg');
    var own = svg && svg.closest('[data-role="run"]');
    if (own && own.explorer) own.explorer.go(timelineStep(svg, event));
    else if (svg && ax().go) ax().go(timelineStep(svg, event));
  });

  // Follow the explorer: move the cursor, say what this step holds, mark findings at this step.
  document.addEventListener("explorer:step", function (event) {
    var step = event.detail.step, scope = event.detail.root || document; // the run that stepped
    scope.querySelectorAll('[data-role="memory-timeline"]').forEach(function (section) {
      var perBar = +section.getAttribute("data-bar-steps") || 1;
      var cursor = section.querySelector('[data-role="timeline-cursor"]');
      var bar = section.querySelector('.tl-bar[data-goto="' + Math.floor(step / perBar) * perBar + '"]');
      if (cursor && bar) cursor.setAttribute("x", bar.getAttribute("data-x"));
      var data = section.querySelector('[data-role="timeline-data"]');
      var readout = section.querySelector('[data-role="timeline-readout"]');
      if (!data || !readout) return;
      if (!section.points) section.points = JSON.parse(data.textContent);
      var p = section.points[step];
      if (p) {
        // The total first: the figure a finding quotes "at step N" is this one.
        var parts = { step: step + 1, total: fmt(p[3]), variables: fmt(p[0]), graph: fmt(p[1]), shared: fmt(p[2]) };
        var text = p[2]
          ? t("step {step}: {total} in all — {variables} through variables · {graph} held only by the graph · {shared} shared", parts)
          : t("step {step}: {total} in all — {variables} through variables · {graph} held only by the graph", parts);
        // the GPU model's figures (app/trace/gpu.py), and what a real device said when it ran on one
        if (p.length > 5) text += " · " + t("on a GPU (model): {allocated} allocated, {reserved} reserved",
                                            { allocated: fmt(p[4]), reserved: fmt(p[5]) });
        if (p.length > 6) text += " · " + t("measured: {allocated} allocated", { allocated: fmt(p[6]) });
        readout.textContent = text;
      }
    });
    scope.querySelectorAll(".diag[data-goto]").forEach(function (item) {
      item.classList.toggle("here", +item.getAttribute("data-goto") === step);
    });
    markCuts(scope, step);
  });
})();
