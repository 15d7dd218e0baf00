// History entries and the address bar.
//
// Every run of new code and every picked example is an entry of its own, so Back returns to the
// code before it (and Forward again) instead of leaving the site. The address of an entry says all
// that is needed to open it again (`?code=`, `?example=`, `?s=`, `step`), and this module keeps it a
// permalink to the entry's run and the step on screen; on Back/Forward the code is read from the
// address, never from stored state. A run that arrives after its entry was left (Back while it
// ran) never writes into another entry's address.
import { decode, encode, permalink, runOptions, setRunOptions } from "./permalink.js";
import { withLang } from "./text.js";

const ADDRESS_AFTER_MS = 500; // once the reader stops stepping: each write makes the browser look at the favicon

export class Navigation {
  constructor(editor, runs, examples, gallery) {
    this.editor = editor;
    this.runs = runs;
    this.examples = examples;
    this.gallery = gallery;
    this.entryCode = editor.text(); // the code of the current entry: what a reload or Back opens
    this.entry = 0; // counts entries entered (pushed or gone to): async work checks it is still current
    const self = this;
    runs.onStart(function (code, how) {
      if (!how.initial && !how.navigating && code !== self.entryCode) self.push(code);
    });
    window.addEventListener("popstate", function () { self.restore(); });
    // "Run cuda on the CPU" applies at once: the code runs again, and its address says so (`cuda=1`).
    const toggle = document.querySelector('input[name="cuda_on_cpu"]');
    if (toggle) toggle.addEventListener("change", function () { runs.submit({}); });
    let timer = null;
    document.addEventListener("explorer:step", function () {
      clearTimeout(timer);
      timer = setTimeout(function () { self.keepAddress(); }, ADDRESS_AFTER_MS);
    });
  }

  // A new entry for `code`, at `url` when it is known now (an example), else at its permalink.
  push(code, url) {
    this.entryCode = code;
    const entry = ++this.entry;
    // Pushed now, before the run answers: the entry exists even if the run ends without steps.
    history.pushState(null, "", url || location.href);
    if (url) return;
    const self = this;
    encode(code).then(function (token) {
      const url = withLang(location.origin + "/?code=" + token + runOptions());
      if (self.entry === entry && url !== location.href) history.replaceState(null, "", url);
    });
  }

  // The address of the current entry: its run's permalink at the step on screen (no `step` for the
  // last one, where a run opens anyway). Written only when it changes: each write costs the browser
  // a look at the favicon.
  keepAddress() {
    const run = window.AX && window.AX.explorer, entry = this.entry, self = this;
    if (!run || run.code !== this.entryCode) return; // not this entry's run
    permalink(run.code, run.step < run.count - 1 ? run.step + 1 : 0).then(function (url) {
      if (self.entry !== entry || window.AX.explorer !== run || url === location.href) return;
      history.replaceState(null, "", url);
    });
  }

  restore() {
    const params = new URLSearchParams(location.search), self = this, entry = ++this.entry;
    this.codeAt(params).then(function (code) {
      if (self.entry !== entry) return; // Back twice in a row: only the last entry opens
      if (code === null) { location.reload(); return; } // the server explains a link it cannot open
      self.entryCode = code;
      setRunOptions(params);
      self.editor.setText(code, "input.history"); // undoable: edits made before Back are not lost
      self.gallery.showCode(code);
      const step = /^\d+$/.test(params.get("step") || "") ? +params.get("step") : 0;
      const run = window.AX && window.AX.explorer;
      if (run && run.code === code && step && window.AX.go) window.AX.go(step - 1);
      else self.runs.submit({ step, navigating: true });
    });
  }

  // The code an address opens, or null when only the server can say what is wrong with it.
  codeAt(params) {
    const fail = function () { return null; };
    if (params.get("code")) return decode(params.get("code")).catch(fail);
    if (params.get("s")) {
      return fetch(window.AXT.request("/api/links/" + encodeURIComponent(params.get("s"))))
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (link) { return link ? link.code : null; }, fail);
    }
    const slug = params.get("example");
    const example = slug ? this.examples.find(function (e) { return e.slug === slug; }) : this.examples[0];
    return Promise.resolve(example ? example.code : null);
  }
}
