// Diagnostics panel and memory timeline: jump to a step, light up the tensors a finding involves.
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

  function fmt(n) {
    if (n < 10 * 1024) return t("{n} bytes", { n: window.AXT.number(n) });
    if (n < 10 * 1024 * 1024) return (n / 1024).toFixed(1) + " KiB";
    return (n / (1024 * 1024)).toFixed(1) + " MiB";
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
    if (ax().go) ax().go(step);
    highlight(run, ids);
    run.querySelectorAll(".diag.active").forEach(function (el) { el.classList.remove("active"); });
    item.classList.add("active");
    var explorer = ax().explorer;
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

  document.addEventListener("click", function (event) {
    var item = event.target.closest(".diag[data-goto]");
    if (item) {
      if (event.target.closest(".diag-line") || !window.getSelection().toString()) showFinding(item);
      return;
    }
    var svg = event.target.closest('[data-role="memory-timeline"] svg');
    if (svg && ax().go) ax().go(timelineStep(svg, event));
  });

  // Follow the explorer: move the cursor, say what this step holds, mark findings at this step.
  document.addEventListener("explorer:step", function (event) {
    var step = event.detail.step;
    document.querySelectorAll('[data-role="memory-timeline"]').forEach(function (section) {
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
        var parts = { step: step + 1, variables: fmt(p[0]), graph: fmt(p[1]), shared: fmt(p[2]) };
        readout.textContent = p[2]
          ? t("step {step}: {variables} through variables · {graph} held only by the graph · {shared} shared", parts)
          : t("step {step}: {variables} through variables · {graph} held only by the graph", parts);
      }
    });
    document.querySelectorAll(".diag[data-goto]").forEach(function (item) {
      item.classList.toggle("here", +item.getAttribute("data-goto") === step);
    });
  });
})();
