// The standalone page of a run (templates/standalone.html): unpack the run, hand it to the page's own
// scripts, follow the steps in the code listing, and, inside a notebook's <iframe>, fit the frame.
//
// The run fragment travels deflated in base64 (app/standalone.py); the browser's DecompressionStream
// inflates it. The views' scripts (explorer.js, graph.js) set up what htmx swaps in through
// htmx.onLoad: this page has no htmx, so a stand-in collects their set-ups and calls them once the
// fragment is in. Nothing is fetched. Loaded inline in <head>, before the views' scripts.
(function () {
  "use strict";

  var setups = [];
  if (!window.htmx) window.htmx = { onLoad: function (setup) { setups.push(setup); } };
  var t = window.AXT.t;

  function frame() {
    try { return window.frameElement; } catch (error) { return null; } // another origin's frame
  }

  // As tall as the page: the notebook scrolls, not the frame.
  function fit() {
    var own = frame();
    if (!own) return;
    var height = Math.ceil(document.documentElement.getBoundingClientRect().height);
    if (Math.abs((parseFloat(own.style.height) || 0) - height) > 1) own.style.height = height + "px";
  }

  function say(text) {
    var note = document.querySelector('[data-role="unpacking"]');
    if (note) note.textContent = text;
  }

  function inflate(base64) {
    var raw = atob(base64), bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).text();
  }

  // The code listing follows the explorer: the line of the step, the line of what is pointed at, the
  // line that failed. The listing scrolls itself (never the page: it may be a notebook's).
  var marked = {};
  function mark(kind, line) {
    var list = document.querySelector('[data-role="code-lines"]');
    if (!list) return;
    if (marked[kind]) marked[kind].classList.remove("is-" + kind);
    var item = line ? list.querySelector('li[data-line="' + line + '"]') : null;
    marked[kind] = item;
    if (!item) return;
    item.classList.add("is-" + kind);
    if (kind !== "step") return;
    var top = item.offsetTop - list.offsetTop, bottom = top + item.offsetHeight;
    if (top < list.scrollTop || bottom > list.scrollTop + list.clientHeight) {
      list.scrollTop = Math.max(0, top - list.clientHeight / 3);
    }
  }
  document.addEventListener("explorer:step", function (event) { mark("step", event.detail.line); });
  document.addEventListener("explorer:focus", function (event) { mark("hover", event.detail && event.detail.line); });
  document.addEventListener("explorer:error", function (event) { mark("error", event.detail && event.detail.line); });

  function open() {
    var slot = document.querySelector('[data-role="run-slot"]');
    var packed = slot && slot.querySelector('script[data-role="packed-run"]');
    if (!packed) return;
    if (frame()) {
      document.documentElement.classList.add("sa-framed");
      if (window.ResizeObserver) new ResizeObserver(fit).observe(document.body);
      fit();
    }
    if (typeof DecompressionStream === "undefined" || !window.Blob || !Blob.prototype.stream) {
      say(t("This browser cannot open the run: it needs DecompressionStream (Chrome 80, Firefox 113, Safari 16.4 or later)."));
      return;
    }
    inflate(packed.textContent.trim()).then(function (html) {
      slot.innerHTML = html; // the server's own fragment: every user string in it is escaped text
      setups.forEach(function (setup) { setup(slot); });
      fit();
    }, function () {
      say(t("This file is damaged: the run in it cannot be unpacked."));
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", open);
  else open();
})();
