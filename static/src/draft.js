// Unrun edits are kept in localStorage, so a reload (or a closed tab) does not lose them.
//
// A draft remembers the code it was edited from (`base`). Reopening that same code (a reload)
// brings the edits back into the editor, as one undoable change; opening other code only offers
// them (a shared link opens what it says). A run of the draft's code, or undoing back to the
// entry's code, ends the draft.
import { t } from "./text.js";
import { $, store } from "./ui.js";

const KEY = "autograd-explorer:draft";
const SAVE_AFTER_MS = 250;

export class Draft {
  constructor(editor, runs, entryCode) {
    this.editor = editor;
    this.entryCode = entryCode; // () => the code of the current history entry
    this.note = $("draft-note");
    this.timer = null;
    const self = this;
    editor.onChange(function () {
      clearTimeout(self.timer);
      self.timer = setTimeout(function () { self.save(); }, SAVE_AFTER_MS);
    });
    window.addEventListener("pagehide", function () { if (self.timer) self.save(); });
    runs.onStart(function (code) {
      const saved = store.get(KEY);
      if (saved && saved.code === code) store.remove(KEY);
    });
    this.reopen();
  }

  save() {
    this.timer = null;
    const code = this.editor.text(), base = this.entryCode();
    if (code === base) store.remove(KEY);
    else store.set(KEY, { code, base, saved: Date.now() });
  }

  reopen() {
    const saved = store.get(KEY), opened = this.editor.text(), editor = this.editor;
    if (!saved || typeof saved.code !== "string" || saved.code === opened) return;
    if (saved.base === opened) {
      editor.setText(saved.code, "input.draft");
      this.tell(t("Your unrun edits are back (they are not run yet)."), t("Discard them"), function () {
        editor.setText(opened, "input.draft");
      });
    } else {
      this.tell(t("You have unrun code from an earlier visit."), t("Put it in the editor"), function () {
        editor.setText(saved.code, "input.draft");
      }, function () { store.remove(KEY); }); // dismissed: not offered again
    }
  }

  tell(text, action, act, dismissed) {
    if (!this.note) return;
    const note = this.note;
    note.querySelector('[data-role="draft-text"]').textContent = text;
    const button = note.querySelector('[data-role="draft-action"]');
    button.textContent = action;
    button.onclick = function () { act(); note.hidden = true; };
    note.querySelector('[data-role="draft-close"]').onclick = function () {
      note.hidden = true;
      if (dismissed) dismissed();
    };
    note.hidden = false;
  }
}
