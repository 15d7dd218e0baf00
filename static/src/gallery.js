// The Examples menu: picking one puts its code in the editor (one undoable change) and runs it.
// Code the user edited is never replaced without asking.
import { t } from "./text.js";
import { $ } from "./ui.js";

export class Gallery {
  // `edited(text)`: the editor holds code no history entry has, which must not go without asking.
  constructor(select, examples, editor, edited) {
    this.select = select;
    this.edited = edited;
    this.editor = editor;
    this.summary = $("summary");
    this.bySlug = new Map(examples.map(function (e) { return [e.slug, e]; }));
    this.shown = select.value;
    this.onPick = null; // (example) => void, set by the page
    const self = this;
    select.addEventListener("change", function () { self.pick(select.value); });
    editor.onChange(function (text) {
      const example = self.bySlug.get(self.select.value);
      if (example && example.code !== text) self.show("");
    });
  }

  pick(slug) {
    const example = this.bySlug.get(slug);
    if (!example) { this.show(this.shown); return; }
    const text = this.editor.text();
    if (this.edited(text) && text !== example.code && !window.confirm(
      t("Replace the code in the editor with the example “{title}”?", { title: example.title }) + "\n\n" +
      t("Your edits have not been run. (Ctrl+Z in the editor brings them back.)"))) {
      this.show(this.shown);
      return;
    }
    this.editor.setText(example.code, "input.example");
    this.show(slug);
    if (this.onPick) this.onPick(example);
  }

  // The example whose code this is, if any (an address that carries the code itself).
  showCode(code) {
    let found = "";
    this.bySlug.forEach(function (example, slug) { if (!found && example.code === code) found = slug; });
    this.show(found);
  }

  show(slug) {
    const example = this.bySlug.get(slug);
    this.select.value = example ? slug : "";
    this.shown = this.select.value;
    if (this.summary) this.summary.textContent = example ? example.summary : "";
  }
}
