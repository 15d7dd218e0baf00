// Share: a link to the code in the editor (run or not; the dialog says which), copied at once, and
// its short link /s/<id> (POST /api/links) with a copy button. A run's link keeps the step on screen.
import { t, withLang } from "./text.js";
import { $, copy } from "./ui.js";
import { permalink } from "./permalink.js";

export class Share {
  constructor(button, dialog, editor) {
    this.dialog = dialog;
    this.editor = editor;
    this.ui = {
      state: $("share-state", dialog), link: $("share-link", dialog), short: $("share-short", dialog),
      status: $("share-status", dialog),
    };
    this.asked = 0;
    const self = this, ui = this.ui;
    button.addEventListener("click", function () { self.open(); });
    $("share-close", dialog).addEventListener("click", function () { dialog.close(); });
    dialog.addEventListener("click", function (event) { if (event.target === dialog) dialog.close(); });
    $("share-copy", dialog).addEventListener("click", function () { self.copy(ui.link, t("Link copied")); });
    $("share-copy-short", dialog).addEventListener("click", function () { self.copy(ui.short, t("Short link copied")); });
    [ui.link, ui.short].forEach(function (field) {
      field.addEventListener("focus", function () { field.select(); });
    });
  }

  open() {
    const code = this.editor.text(), run = window.AX && window.AX.explorer, asked = ++this.asked, self = this;
    const ran = !!run && run.code === code;
    const step = ran && run.count ? run.step + 1 : 0;
    const ui = this.ui;
    ui.state.textContent = ran
      ? (step ? t("The code as run, opening at step {step} of {count}.", { step, count: run.count }) : t("The code as run."))
      : t("The code in the editor, not run yet: the link opens it and runs it.");
    ui.state.setAttribute("data-ran", ran ? "1" : "0");
    ui.link.value = ui.short.value = "";
    ui.short.placeholder = t("making a short link…");
    ui.status.textContent = "";
    if (!this.dialog.open) this.dialog.showModal();
    permalink(code, step).then(function (url) {
      if (asked !== self.asked) return;
      ui.link.value = url;
      window.AX.lastShared = url; // tests read the link without the clipboard
      self.copy(ui.link, t("Link copied"));
    });
    this.shortLink(code, step).then(function (url) {
      if (asked === self.asked) ui.short.value = url;
    }, function (error) {
      if (asked === self.asked) ui.short.placeholder = error.message;
    });
  }

  shortLink(code, step) {
    return fetch(window.AXT.request("/api/links"), {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ code }),
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (body) {
        if (!response.ok) throw new Error(body.detail || t("No short link right now; the link above works."));
        return withLang(location.origin + body.url + (step ? "?step=" + step : ""));
      });
    });
  }

  copy(field, done) {
    const status = this.ui.status;
    if (!field.value) return;
    copy(field.value).then(function () { status.textContent = done; }, function () {
      field.focus();
      field.select();
      status.textContent = t("Press Ctrl+C to copy");
    });
  }
}
