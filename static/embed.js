// Autograd Explorer, embedded in another site's <iframe> (templates/embed.html).
//
// - Tells the parent page the frame's height whenever it changes, so the page can size the frame:
//   parent.postMessage({type: "autograd-explorer:height", height}, "*"). Only a number leaves the
//   frame, so any parent may hear it.
// - Keeps "Open in playground" on the code shown (edited or not) and the step on screen.
// - A read-only editor ignores the keys that would edit it (editor.js handles Tab and Enter).
(function () {
  "use strict";

  var AX = (window.AX = window.AX || {});
  AX.embed = true; // explorer.js: leave this frame's own URL (its view, theme …) as it is
  var HEIGHT = "autograd-explorer:height";

  function $(role) { return document.querySelector('[data-role="' + role + '"]'); }

  function reportHeight(root) {
    var last = -1;
    function report() {
      var height = Math.ceil(root.getBoundingClientRect().height);
      if (height === last || window.parent === window) return;
      last = height;
      AX.lastHeight = height;
      window.parent.postMessage({ type: HEIGHT, height: height }, "*");
    }
    if (window.ResizeObserver) new ResizeObserver(report).observe(root);
    window.addEventListener("load", report);
    report();
  }

  function openLink(area) {
    var link = $("open"), stepInput = $("embed-step");
    if (!link) return;
    var base = link.getAttribute("data-base"), original = area.value, timer = null;
    function step() {
      var run = AX.explorer;
      return run && run.code === area.value && run.count ? run.step + 1 : 0;
    }
    function update() {
      var code = area.value, n = step();
      if (code === original) {
        link.href = base + (n ? "&step=" + n : "");
        return;
      }
      AX.encode(code).then(function (token) {
        if (area.value === code) link.href = location.origin + "/?code=" + token + (n ? "&step=" + n : "");
      });
    }
    // A new run announces its first step before it is AX.explorer: read it once the event is over.
    document.addEventListener("explorer:step", function () { setTimeout(update, 0); });
    area.addEventListener("input", function () {
      if (stepInput) stepInput.value = ""; // an edited snippet opens at its last step
      clearTimeout(timer);
      timer = setTimeout(update, 150);
    });
  }

  function readOnly(area) {
    // Capture on the form runs before editor.js's own handlers on the textarea.
    area.form.addEventListener("keydown", function (event) {
      if (event.target !== area || event.ctrlKey || event.metaKey) return;
      if (event.key === "Enter" || event.key === "Tab") event.stopPropagation();
    }, true);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var root = $("embed");
    if (!root) return;
    reportHeight(root);
    var area = $("code");
    if (!area) return;
    openLink(area);
    if (area.readOnly) readOnly(area);
  });
})();
