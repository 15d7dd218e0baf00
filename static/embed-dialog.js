// Autograd Explorer: the playground's Embed button (templates/_embed_dialog.html).
//
// Hands out, for the code and step on screen: an <iframe> snippet of /embed (plus an optional
// listener that sizes the frame from the "autograd-explorer:height" messages it posts), and a
// Markdown image of /render.svg for READMEs. The code travels in the URL (the permalink token);
// a snippet too long for a comfortable URL is stored as a short link (POST /api/links) instead.
(function () {
  "use strict";

  var AX = (window.AX = window.AX || {});
  var t = window.AXT.t;
  var LONG_TOKEN = 6000; // characters: beyond this, use a short link (?s=<id>)
  var HEIGHT = "autograd-explorer:height";

  function $(role) { return document.querySelector('[data-role="' + role + '"]'); }

  function attr(text) {
    return text.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }


  // "code=<token>" (self-contained, works on any server) or "s=<id>" for long snippets.
  function source(code) {
    return AX.encode(code).then(function (token) {
      if (token.length <= LONG_TOKEN) return "code=" + token;
      return fetch(window.AXT.request("/api/links"), {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ code: code }),
      }).then(function (response) {
        if (!response.ok) throw new Error("short link refused");
        return response.json();
      }).then(function (link) { return "s=" + encodeURIComponent(link.id); });
    });
  }

  // The parent page's half of auto-height (README.md "Auto-height" shows the same script): sizes
  // each explorer frame from its height messages, and tells it where the window's view begins in it
  // (static/embed.js keeps the step controls there).
  var LISTENER = [
    "<script>",
    "// Autograd Explorer frames post their height: size each frame to fit, and tell it where the",
    "// window's view begins in it, so its step controls stay in sight (once per page).",
    "(function () {",
    "  var origin = ORIGIN, frames = [];",
    "  function tell() {",
    "    // a sticky header of this page, if it declares one the usual way (scroll-padding-top)",
    "    var header = parseFloat(getComputedStyle(document.documentElement).scrollPaddingTop) || 0;",
    "    frames = frames.filter(function (f) { return f.isConnected; });  // a frame the page took away",
    "    frames.forEach(function (f) {",
    "      var top = header - f.getBoundingClientRect().top - f.clientTop;",
    "      f.contentWindow.postMessage({ type: \"autograd-explorer:viewport\", top: top }, origin);",
    "    });",
    "  }",
    "  addEventListener(\"message\", function (e) {",
    "    if (e.origin !== origin || !e.data || e.data.type !== \"autograd-explorer:height\") return;",
    "    document.querySelectorAll(\"iframe\").forEach(function (f) {",
    "      if (f.contentWindow !== e.source) return;",
    "      f.style.height = e.data.height + \"px\";",
    "      if (frames.indexOf(f) < 0) frames.push(f);",
    "    });",
    "    tell();",
    "  });",
    "  addEventListener(\"scroll\", tell, { passive: true, capture: true });",
    "  addEventListener(\"resize\", tell);",
    "})();",
    "</script>",
  ].join("\n");

  function listener(origin) {
    return LISTENER.replace("ORIGIN", JSON.stringify(origin));
  }

  function Dialog(button) {
    var dialog = $("embed-dialog");
    if (!dialog) return;
    var ui = {
      view: $("embed-view"), theme: $("embed-theme"), readonly: $("embed-readonly"),
      autorun: $("embed-autorun"), resize: $("embed-resize"), snippet: $("embed-snippet"),
      image: $("embed-image"), preview: $("embed-preview"), status: $("embed-status"), where: $("embed-where"),
      compare: $("embed-compare-code"),
    };
    var state = { code: null, step: 0, source: null, compare: "" };

    function status(text) {
      ui.status.textContent = text;
      clearTimeout(status.timer);
      status.timer = setTimeout(function () { ui.status.textContent = ""; }, 2400);
    }

    function render() {
      if (!state.source) return;
      var origin = location.origin, step = state.step ? "&step=" + state.step : "";
      // the page's language travels along (English is the default: no parameter)
      var lang = window.AXT.lang() !== "en" ? "&lang=" + encodeURIComponent(window.AXT.lang()) : "";
      // two codes side by side: both travel as tokens (code=…&compare_code=…), opened at /compare
      var pair = state.compare && state.source.indexOf("code=") === 0 ? state.source + "&compare_code=" + state.compare : "";
      var query = (pair || state.source) + step + "&view=" + ui.view.value + "&theme=" + ui.theme.value + lang;
      var src = origin + "/embed?" + query + (ui.readonly.checked ? "&readonly=1" : "") +
        (ui.autorun.checked ? "&autorun=1" : "");
      var html = '<iframe src="' + attr(src) + '" title="' + attr(t("Autograd Explorer")) + '" width="100%" height="560" ' +
        'style="border:0" loading="lazy"></iframe>';
      if (ui.resize.checked) html += "\n" + listener(origin);
      ui.snippet.value = html;
      ui.preview.href = src;
      var image = origin + "/render.svg?" + query;
      var playground = origin + (pair ? "/compare?" + pair : "/?" + state.source) + step + lang;
      var alt = state.step ? t("Autograd Explorer, step {step}", { step: state.step }) : t("Autograd Explorer");
      ui.image.value = "[![" + alt + "](" + image + ")](" + playground + ")";
    }

    function open() {
      // the code in the editor; the step on screen only when that code is the run's
      var run = AX.explorer, code = AX.editor.text(), ran = !!run && run.code === code;
      state.code = code;
      state.step = ran && run.count ? run.step + 1 : 0;
      state.source = null;
      ui.snippet.value = ui.image.value = "";
      ui.where.textContent = !ran ? t("the code in the editor (not run yet)")
        : state.step ? t("opens at step {step}", { step: state.step }) : "";
      if (!dialog.open) dialog.showModal();
      source(state.code).then(function (found) {
        state.source = found;
        render();
      }, function () { ui.snippet.value = t("This snippet could not be stored as a short link; try again."); });
    }

    // The other code of a side-by-side embed, encoded as it is typed (a long one cannot travel in a link).
    function compareWith() {
      var other = ui.compare.value;
      if (!other.trim()) { state.compare = ""; render(); return; }
      AX.encode(other).then(function (token) {
        if (ui.compare.value !== other) return; // typed on since: the newer text is on its way
        var fits = token.length <= LONG_TOKEN && (!state.source || state.source.indexOf("code=") === 0);
        state.compare = fits ? token : "";
        if (!fits) status(t("Too long to compare in a link: the embed shows this code alone."));
        render();
      });
    }

    button.addEventListener("click", open);
    ui.compare.addEventListener("input", compareWith);
    $("embed-close").addEventListener("click", function () { dialog.close(); });
    dialog.addEventListener("click", function (event) { if (event.target === dialog) dialog.close(); });
    [ui.view, ui.theme, ui.readonly, ui.autorun, ui.resize].forEach(function (el) {
      el.addEventListener("change", render);
    });
    $("embed-copy").addEventListener("click", function () {
      AX.copy(ui.snippet.value).then(function () { status(t("HTML copied")); }, function () {
        ui.snippet.select();
        status(t("Press Ctrl+C to copy"));
      });
    });
    $("embed-copy-image").addEventListener("click", function () {
      AX.copy(ui.image.value).then(function () { status(t("Markdown copied")); }, function () {
        ui.image.select();
        status(t("Press Ctrl+C to copy"));
      });
    });
    [ui.snippet, ui.image].forEach(function (field) {
      field.addEventListener("focus", function () { field.select(); });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var button = $("embed-button");
    if (button && AX.encode && AX.editor) Dialog(button);
  });
})();
