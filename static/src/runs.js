// The editor's side of a run: what the form posts, and the line marks of the run on screen.
//
// htmx posts the form (the Run button, Ctrl/Cmd+Enter, an example, Back/Forward) or, on page load,
// the #run placeholder with the code the page was opened with. Either way the editor is told which
// code the new run is of, and drops the old run's marks at once: a run that ends without steps (a
// syntax error, a refusal, "busy") leaves no stale highlighted line behind.

export class Runs {
  constructor(form, editor) {
    this.form = form;
    this.editor = editor;
    this.next = null; // options of the run submit() asked for
    this.listeners = [];
    const self = this;
    document.body.addEventListener("htmx:configRequest", function (event) { self.configure(event.detail); });
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
    this.editor.startRun(code);
    this.listeners.forEach(function (listener) { listener(code, how); });
  }
}
