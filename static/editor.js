// Autograd Explorer: the code editor (line numbers, Tab, Ctrl/Cmd+Enter, line marks), the gallery,
// and permalinks. A plain <textarea>: what the user types is only ever a form value or text.
(function () {
  "use strict";

  var AX = (window.AX = window.AX || {});
  var INDENT = "    ";

  // Permalink token: raw DEFLATE of the UTF-8 code in unpadded base64url (app/web/permalink.py).
  AX.encode = function (code) {
    var stream = new Blob([new TextEncoder().encode(code)]).stream()
      .pipeThrough(new CompressionStream("deflate-raw"));
    return new Response(stream).arrayBuffer().then(function (buffer) {
      var bytes = new Uint8Array(buffer), binary = "";
      for (var i = 0; i < bytes.length; i++) binary += String.fromCharCode(bytes[i]);
      return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    });
  };

  AX.permalink = function (code, step) {
    return AX.encode(code).then(function (token) {
      return location.origin + location.pathname + "?code=" + token + (step ? "&step=" + step : "");
    });
  };

  function $(role) { return document.querySelector('[data-role="' + role + '"]'); }

  function Editor() {
    this.area = $("code");
    this.gutter = $("gutter");
    this.layer = $("layer");
    this.marks = { step: $("step-line"), hover: $("hover-line"), error: $("error-line") };
    this.inline = $("error-inline");
    this.form = document.getElementById("editor-form");
    this.lines = 0;
    this.numbers();
    this.bind();
  }

  Editor.prototype.numbers = function () {
    var count = this.area.value.split("\n").length;
    if (count === this.lines) return;
    var text = [];
    for (var i = 1; i <= count; i++) text.push(String(i));
    this.gutter.textContent = text.join("\n");
    this.lines = count;
  };

  Editor.prototype.metrics = function () {
    var style = getComputedStyle(this.area);
    return { line: parseFloat(style.lineHeight), top: parseFloat(style.paddingTop) };
  };

  // Line marks live in a layer under the transparent textarea and scroll with it.
  Editor.prototype.mark = function (which, line) {
    var el = this.marks[which];
    if (!line) { el.hidden = true; return; }
    var m = this.metrics();
    el.style.top = m.top + (line - 1) * m.line + "px";
    el.style.height = m.line + "px";
    el.hidden = false;
    if (which === "step") this.reveal(line, m);
  };

  Editor.prototype.reveal = function (line, m) {
    var top = m.top + (line - 1) * m.line, area = this.area;
    if (top < area.scrollTop || top + m.line > area.scrollTop + area.clientHeight) {
      area.scrollTop = Math.max(0, top - area.clientHeight / 3);
    }
  };

  Editor.prototype.error = function (detail) {
    this.mark("error", detail && detail.line);
    this.inline.hidden = !detail;
    if (!detail) return;
    var m = this.metrics();
    this.inline.textContent = detail.text;
    this.inline.style.top = m.top + detail.line * m.line + "px";
  };

  Editor.prototype.sync = function () {
    this.gutter.scrollTop = this.area.scrollTop;
    this.layer.style.transform = "translate(" + -this.area.scrollLeft + "px," + -this.area.scrollTop + "px)";
  };

  Editor.prototype.insert = function (text) {
    // execCommand keeps the browser's undo history; setRangeText is the fallback.
    if (!document.execCommand || !document.execCommand("insertText", false, text)) {
      var a = this.area, start = a.selectionStart;
      a.setRangeText(text, start, a.selectionEnd, "end");
      a.dispatchEvent(new Event("input", { bubbles: true }));
    }
  };

  Editor.prototype.indent = function (outdent) {
    var a = this.area, value = a.value, start = a.selectionStart, end = a.selectionEnd;
    if (start === end && !outdent) { this.insert(INDENT); return; }
    var lineStart = value.lastIndexOf("\n", start - 1) + 1;
    var block = value.slice(lineStart, end);
    var changed = block.split("\n").map(function (line) {
      if (!outdent) return INDENT + line;
      return line.replace(/^ {1,4}|^\t/, "");
    }).join("\n");
    a.setSelectionRange(lineStart, end);
    this.insert(changed);
    a.setSelectionRange(lineStart, lineStart + changed.length);
  };

  Editor.prototype.newline = function () {
    var a = this.area, value = a.value, start = a.selectionStart;
    var lineStart = value.lastIndexOf("\n", start - 1) + 1;
    var line = value.slice(lineStart, start);
    var pad = /^[ \t]*/.exec(line)[0];
    if (/:\s*$/.test(line)) pad += INDENT;
    this.insert("\n" + pad);
  };

  Editor.prototype.run = function () {
    if (this.form.requestSubmit) this.form.requestSubmit();
    else this.form.dispatchEvent(new Event("submit", { cancelable: true, bubbles: true }));
  };

  Editor.prototype.bind = function () {
    var self = this, area = this.area;
    area.addEventListener("focus", function () { self.tabLeaves = false; });
    area.addEventListener("input", function () {
      self.numbers();
      document.body.classList.add("code-edited");
    });
    area.addEventListener("scroll", function () { self.sync(); });
    area.addEventListener("keydown", function (event) {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        self.run();
      } else if (event.key === "Escape") {
        self.tabLeaves = true; // Esc, then Tab, leaves the editor (keyboard users are not trapped)
      } else if (event.key === "Tab" && !event.altKey && !event.ctrlKey && !event.metaKey) {
        if (self.tabLeaves) { self.tabLeaves = false; return; }
        event.preventDefault();
        self.indent(event.shiftKey);
      } else if (event.key === "Enter" && !event.shiftKey && !event.altKey) {
        event.preventDefault();
        self.newline();
      }
    });
    document.addEventListener("explorer:step", function (event) { self.mark("step", event.detail.line); });
    document.addEventListener("explorer:focus", function (event) { self.mark("hover", event.detail.line); });
    document.addEventListener("explorer:error", function (event) { self.error(event.detail); });
    document.body.addEventListener("htmx:beforeRequest", function (event) {
      if (event.detail.elt === self.form || event.detail.elt.id === "run") {
        document.body.classList.remove("code-edited");
        self.error(null);
      }
    });
  };

  function Gallery(editor) {
    var select = $("gallery");
    if (!select) return;
    var data = JSON.parse(document.getElementById("gallery-data").textContent);
    var bySlug = {};
    data.forEach(function (example) { bySlug[example.slug] = example; });
    var summary = $("summary");
    select.addEventListener("change", function () {
      var example = bySlug[select.value];
      if (!example) return;
      editor.area.value = example.code;
      editor.area.scrollTop = 0;
      editor.numbers();
      summary.textContent = example.summary;
      editor.run();
    });
    editor.area.addEventListener("input", function () {
      if (select.value) { select.value = ""; summary.textContent = ""; }
    });
  }

  function toast(text) {
    var el = $("toast");
    if (!el) return;
    el.textContent = text;
    el.classList.add("show");
    clearTimeout(toast.timer);
    toast.timer = setTimeout(function () { el.classList.remove("show"); }, 2400);
  }

  var copy = (AX.copy = function (text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    // Plain http on another host: no async clipboard, fall back to a selected hidden field.
    var field = document.createElement("textarea");
    field.value = text;
    field.setAttribute("readonly", "");
    field.className = "offscreen";
    document.body.appendChild(field);
    field.select();
    var ok = document.execCommand("copy");
    field.remove();
    return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  });

  function Share(editor) {
    var button = $("share");
    if (!button) return;
    button.addEventListener("click", function () {
      var run = AX.explorer;
      var code = run ? run.code : editor.area.value;
      AX.permalink(code, run ? run.step + 1 : 0).then(function (url) {
        AX.lastShared = url;
        history.replaceState(null, "", url);
        return copy(url).then(
          function () { toast("Link copied"); },
          function () { toast("Copy the link from the address bar"); }
        );
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (!$("code")) return;
    var editor = (AX.editor = new Editor());
    Gallery(editor);
    Share(editor);
  });
})();
