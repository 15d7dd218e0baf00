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

  // The shared stepper (stacked sides): each side's step in words, beside its badge.
  function showStep(side, explorer) {
    var compare = side.closest('[data-role="compare"]');
    var label = compare && compare.querySelector('[data-role="compare-label"][data-side="' + side.getAttribute("data-side") + '"]');
    var text = explorer.count ? explorer.label(explorer.step) : "";
    if (label && label.textContent !== text) label.textContent = text;
  }

  // It steps the first side that ran (the other follows it by line, below), else the second.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-compare-step]");
    if (!button) return;
    var runs = button.closest('[data-role="compare"]').querySelectorAll('[data-role="compare-side"] [data-role="run"]');
    var lead = null;
    for (var i = 0; i < runs.length && !lead; i++) if (runs[i].explorer && runs[i].explorer.count) lead = runs[i].explorer;
    if (!lead) return;
    lead.go(button.getAttribute("data-compare-step") === "next" ? lead.nextStep() : lead.prevStep());
  });

  document.addEventListener("explorer:step", function (event) {
    var side = sideOf(event.detail.root);
    if (!side) return;
    markLine(side, event.detail.line);
    if (event.detail.root.explorer) showStep(side, event.detail.root.explorer);
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
