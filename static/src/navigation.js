// History entries: every run of new code and every picked example is an entry of its own, so Back
// returns to the code before it (and Forward again) instead of leaving the site.
//
// The address of an entry says everything needed to open it again (`?code=`, `?example=`, `?s=`,
// `step`): static/explorer.js keeps rewriting the current entry's address to the run's permalink and
// step, so on Back/Forward the code is read from the address, never from stored state.
import { decode, encode } from "./permalink.js";

export class Navigation {
  constructor(editor, runs, examples, gallery) {
    this.editor = editor;
    this.runs = runs;
    this.examples = examples;
    this.gallery = gallery;
    this.entryCode = editor.text(); // the code of the current entry: what a reload or Back opens
    this.pushes = 0;
    const self = this;
    runs.onStart(function (code, how) {
      if (!how.initial && !how.navigating && code !== self.entryCode) self.push(code);
    });
    window.addEventListener("popstate", function () { self.restore(); });
  }

  // A new entry for `code`, at `url` when it is known now (an example), else at its permalink.
  push(code, url) {
    this.entryCode = code;
    const mine = ++this.pushes;
    // Pushed now, before the run answers, so the explorer's address updates land on the new entry.
    history.pushState(null, "", url || location.href);
    if (url) return;
    encode(code).then(function (token) {
      if (this.pushes === mine) history.replaceState(null, "", "/?code=" + token);
    }.bind(this));
  }

  restore() {
    const params = new URLSearchParams(location.search), self = this;
    this.codeAt(params).then(function (code) {
      if (code === null) { location.reload(); return; } // the server explains a link it cannot open
      self.entryCode = code;
      self.editor.setText(code, "input.history"); // undoable: edits made before Back are not lost
      self.gallery.show(params.get("example") || (params.toString() ? "" : self.examples[0].slug));
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
      return fetch("/api/links/" + encodeURIComponent(params.get("s")))
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (link) { return link ? link.code : null; }, fail);
    }
    const slug = params.get("example");
    const example = slug ? this.examples.find(function (e) { return e.slug === slug; }) : this.examples[0];
    return Promise.resolve(example ? example.code : null);
  }
}
