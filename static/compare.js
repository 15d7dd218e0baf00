// Bug vs fix, side by side (templates/_compare.html): two runs, each stepped by static/explorer.js.
//
// Stepping one side steps the other to the matching step (app/render/compare.py matched them by
// line: the same point of the program). Each side's code listing marks the line its step ran.
// Never writes HTML: attributes and textContent only.
(function () {
  "use strict";

  var syncing = false;

  function sideOf(root) {
    return root && root.closest ? root.closest('[data-role="compare-side"]') : null;
  }

  function markLine(side, line) {
    var was = side.querySelector('.cl[aria-current="step"]');
    var now = side.querySelector('.cl[data-line="' + line + '"]');
    if (was === now) return;
    if (was) was.removeAttribute("aria-current");
    if (now) now.setAttribute("aria-current", "step");
  }

  document.addEventListener("explorer:step", function (event) {
    var side = sideOf(event.detail.root);
    if (!side) return;
    markLine(side, event.detail.line);
    if (syncing) return; // this step is the other side following: it does not lead back
    var compare = side.closest('[data-role="compare"]');
    if (!compare.sync) compare.sync = JSON.parse(compare.querySelector('script[data-role="compare-data"]').textContent);
    var role = side.getAttribute("data-side");
    var other = compare.querySelector('[data-role="compare-side"]:not([data-side="' + role + '"])');
    var target = compare.sync[role][event.detail.step];
    var run = other && other.querySelector('[data-role="run"]');
    var explorer = run && run.explorer;
    if (!explorer || target === undefined) return;
    syncing = true;
    try { explorer.go(target); } finally { syncing = false; }
  });
})();
