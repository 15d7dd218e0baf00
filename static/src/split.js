// The editor/views split: drag the separator, or focus it and use ← → (Home, End); double-click
// restores the default. The width is remembered. A separator with a value, as ARIA describes one.
import { store } from "./ui.js";

const KEY = "autograd-explorer:editor-width";
const MIN = 280; // px: the editor stays usable
const MIN_VIEWS = 360; // px left for the views
const STEP = 32;

export class Split {
  constructor(separator, workspace, pane) {
    this.separator = separator;
    this.workspace = workspace;
    this.pane = pane;
    const self = this, saved = store.get(KEY);
    if (typeof saved === "number") this.set(saved, false);
    this.sync();
    separator.addEventListener("pointerdown", function (event) {
      if (event.button !== 0) return;
      event.preventDefault();
      separator.setPointerCapture(event.pointerId);
      const start = event.clientX - self.width();
      const move = function (e) { self.set(e.clientX - start, false); };
      const up = function () {
        separator.removeEventListener("pointermove", move);
        separator.removeEventListener("pointerup", up);
        separator.removeEventListener("pointercancel", up);
        store.set(KEY, self.width());
      };
      separator.addEventListener("pointermove", move);
      separator.addEventListener("pointerup", up);
      separator.addEventListener("pointercancel", up);
    });
    separator.addEventListener("keydown", function (event) {
      const moves = { ArrowLeft: -STEP, ArrowRight: STEP, Home: -Infinity, End: Infinity };
      if (!(event.key in moves)) return;
      event.preventDefault();
      event.stopPropagation(); // ← → here resize; they do not step the run
      self.set(self.width() + moves[event.key], true);
    });
    separator.addEventListener("dblclick", function () {
      self.workspace.style.removeProperty("--editor-width");
      store.remove(KEY);
      self.sync();
    });
    window.addEventListener("resize", function () { self.sync(); });
  }

  width() { return Math.round(this.pane.getBoundingClientRect().width); }

  max() { return Math.max(MIN, this.workspace.clientWidth - MIN_VIEWS); }

  set(px, remember) {
    const width = Math.round(Math.max(MIN, Math.min(this.max(), px)));
    // A custom property through the CSSOM (not a style attribute): allowed under the CSP.
    this.workspace.style.setProperty("--editor-width", width + "px");
    if (remember) store.set(KEY, width);
    this.sync();
  }

  sync() {
    const s = this.separator;
    s.setAttribute("aria-valuemin", String(MIN));
    s.setAttribute("aria-valuemax", String(this.max()));
    s.setAttribute("aria-valuenow", String(this.width()));
    s.setAttribute("aria-valuetext", "code editor " + this.width() + " pixels wide");
  }
}
