// Autograd Explorer, embedded in another site's <iframe> (templates/embed.html).
//
// - Tells the parent page the frame's height whenever it changes, so the page can size the frame:
//   parent.postMessage({type: "autograd-explorer:height", height}, "*"). Only a number leaves the
//   frame, so any parent may hear it.
// - Keeps the step controls in sight while a tall run is read (embed.css: the stepper is sticky at
//   --ax-view-top). A frame that scrolls itself needs nothing more; a frame sized to its content
//   (auto-height) never scrolls, the parent page does, so the parent's listener tells the frame
//   where the page's view begins: {type: "autograd-explorer:viewport", top} (CSS px of the frame
//   above the view's top; README's listener and the Embed dialog's send it on scroll and resize).
// - Keeps "Open in playground" on the code shown (edited or not) and the step on screen.
(function () {
  "use strict";

  var AX = (window.AX = window.AX || {});
  AX.embed = true; // explorer.js: leave this frame's own URL (its view, theme …) as it is
  var HEIGHT = "autograd-explorer:height";
  var VIEWPORT = "autograd-explorer:viewport";

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

  // Only the page that frames us moves our steppers, and only to a place inside this frame: the
  // value is a length, clamped, set as a custom property (CSSOM: the CSP allows it, no inline style)
  // on the steppers themselves. Not on the root: every element inherits a root custom property, so a
  // change there restyles the whole run (a 100-iteration leak's embed: 18 ms a scroll message, and
  // 0.6 ms on the steppers; python -m app.bench embed_scroll).
  var STICKY = ".run > .stepper, [data-role=compare-stepper]";

  function followParentView() {
    var top = "0px";
    function apply() {
      document.querySelectorAll(STICKY).forEach(function (el) {
        if (el.style.getPropertyValue("--ax-view-top") !== top) el.style.setProperty("--ax-view-top", top);
      });
    }
    window.addEventListener("message", function (event) {
      var data = event.data;
      if (event.source !== window.parent || !data || data.type !== VIEWPORT) return;
      var value = Number(data.top);
      if (!isFinite(value)) return;
      value = Math.round(Math.min(Math.max(value, 0), document.documentElement.scrollHeight)) + "px";
      if (value === top) return;
      top = value;
      apply();
    });
    document.addEventListener("explorer:step", apply); // a new run brings a new stepper
  }

  // `editor`: the code editor (static/src/editor.js), made by page.js after this script has run.
  function openLink(editor) {
    var link = $("open"), stepInput = $("embed-step");
    if (!link) return;
    var base = link.getAttribute("data-base"), original = editor.text(), timer = null;
    function step() {
      var run = AX.explorer;
      return run && run.code === editor.text() && run.count ? run.step + 1 : 0;
    }
    function update() {
      var code = editor.text(), n = step();
      if (code === original) {
        link.href = base + (n ? "&step=" + n : "");
        return;
      }
      AX.encode(code).then(function (token) {
        if (editor.text() === code) link.href = location.origin + "/?code=" + token + (n ? "&step=" + n : "");
      });
    }
    // A new run announces its first step before it is AX.explorer: read it once the event is over.
    document.addEventListener("explorer:step", function () { setTimeout(update, 0); });
    editor.onChange(function () {
      if (stepInput) stepInput.value = ""; // an edited snippet opens at its last step
      clearTimeout(timer);
      timer = setTimeout(update, 150);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var root = $("embed");
    if (!root) return;
    reportHeight(root);
    if (window.parent !== window) followParentView();
    if (AX.editor) openLink(AX.editor);
  });
})();
