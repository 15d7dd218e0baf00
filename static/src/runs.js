// The editor's side of a run: what the form posts, and the line marks of the run on screen.
//
// htmx posts the form (the Run button, Ctrl/Cmd+Enter, an example, Back/Forward) or, on page load,
// the #run placeholder with the code the page was opened with. Either way the editor is told which
// code the new run is of, and drops the old run's marks at once: a run that ends without steps (a
// syntax error, a refusal, "busy") leaves no stale highlighted line behind.

import { t } from "./text.js";

// A run's id: random, so that only the page that started a run can stop it.
function runToken() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, function (b) { return b.toString(16).padStart(2, "0"); }).join("");
}

export class Runs {
  constructor(form, editor) {
    this.form = form;
    this.editor = editor;
    this.next = null; // options of the run submit() asked for
    this.listeners = [];
    this.runId = null; // the run on its way: its id, which Stop sends (app/web/stops.py)
    const self = this;
    document.body.addEventListener("htmx:configRequest", function (event) { self.configure(event.detail); });
    // The run's answer is being drawn (before the swap: the page's first run replaces its own element,
    // whose later events reach no one), or the request failed.
    const over = function (event) { if (event.detail.elt === form || event.detail.elt.id === "run") self.ended(); };
    document.body.addEventListener("htmx:beforeSwap", over);
    document.body.addEventListener("htmx:afterRequest", over);
    this.stopButton = form.querySelector('[data-role="stop"]');
    if (this.stopButton) this.stopButton.addEventListener("click", function () { self.stop(); });
    document.addEventListener("explorer:step", function (event) { editor.mark("step", event.detail.line); });
    document.addEventListener("explorer:focus", function (event) { editor.mark("hover", event.detail.line); });
    document.addEventListener("explorer:error", function (event) {
      const detail = event.detail;
      editor.mark("error", detail && detail.line, detail && detail.text);
    });
  }

  // listener(code, how): how.navigating (Back/Forward asked), how.initial (the page's first run).
  onStart(listener) { this.listeners.push(listener); }

  // Run the editor's code; `options.step` (from 1) opens that step, `options.navigating` says that
  // Back/Forward asked for it.
  submit(options) {
    this.next = options || {};
    if (this.form.requestSubmit) this.form.requestSubmit();
    else this.form.dispatchEvent(new Event("submit", { cancelable: true, bubbles: true }));
  }

  configure(detail) {
    const fromForm = detail.elt === this.form;
    if (!fromForm && detail.elt.id !== "run") return;
    const how = fromForm ? this.next || {} : { initial: true };
    this.next = null;
    let code;
    if (fromForm) {
      code = this.editor.text();
      detail.parameters.code = code;
      if (how.step) detail.parameters.step = String(how.step);
    } else {
      code = detail.parameters.code || "";
    }
    this.runId = detail.parameters.run_id = runToken();
    this.form.setAttribute("data-running", "");
    if (this.stopButton) { this.stopButton.disabled = false; this.stopButton.textContent = t("Stop"); }
    this.editor.startRun(code);
    this.listeners.forEach(function (listener) { listener(code, how); });
  }

  ended() {
    this.runId = null;
    this.form.removeAttribute("data-running");
  }

  // Stop the run on its way: the server ends it and answers the steps it has, drawn as any run.
  stop() {
    if (!this.runId) return;
    const button = this.stopButton;
    button.disabled = true;
    button.textContent = t("Stopping…");
    fetch(window.AXT.request("/run/stop"), {
      method: "POST", headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: "run_id=" + encodeURIComponent(this.runId),
    }).catch(function () { return null; });
  }
}
