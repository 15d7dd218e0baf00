// The code editor: CodeMirror 6 with Python highlighting, undo, and the run's line marks (the step's
// line, the hovered tensor's line, the error's line with its message below it).
//
// Content-Security-Policy: CodeMirror writes its own layout rules with style-mod, which puts a <style>
// element into a document (refused under `default-src 'self'`) but a constructed style sheet into a
// shadow root (not an inline style: allowed). So the editor lives in an open shadow root, and its
// colours come from the page's CSS custom properties, which inherit into it (static/theme.css).
//
// The server-rendered <textarea name="code"> stays in the form: it is the editor until this script
// runs (and if it never does), and it keeps the code the page was opened with, which the first run
// posts. Runs asked for by the form post the editor's text (runs.js).
import { EditorState, StateEffect, StateField, Prec, ChangeSet, Text } from "@codemirror/state";
import {
  EditorView, Decoration, WidgetType, keymap, lineNumbers, highlightActiveLineGutter, drawSelection,
} from "@codemirror/view";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import {
  HighlightStyle, bracketMatching, indentOnInput, indentService, indentUnit, syntaxHighlighting, syntaxTree,
} from "@codemirror/language";
import { python } from "@codemirror/lang-python";
import { tags as t } from "@lezer/highlight";

// ---- line marks -------------------------------------------------------------------------------------
// Positions (line starts) in the current document, mapped through every edit, so a mark stays on
// its line while lines above it are added or removed.
const setMark = StateEffect.define(); // {which: "step" | "hover" | "error", pos: number | null, text?}

class ErrorNote extends WidgetType {
  constructor(text) { super(); this.text = text; }
  eq(other) { return other.text === this.text; }
  toDOM() {
    const note = document.createElement("div");
    note.className = "cm-error-note";
    note.setAttribute("data-role", "error-note");
    note.textContent = this.text;
    return note;
  }
  ignoreEvent() { return false; }
}

const marks = StateField.define({
  create() { return { step: null, hover: null, error: null }; },
  update(value, tr) {
    let next = value;
    if (tr.docChanged) {
      const map = function (pos) { return pos === null ? null : tr.changes.mapPos(pos, 1); };
      next = { step: map(value.step), hover: map(value.hover),
        error: value.error && { pos: map(value.error.pos), text: value.error.text } };
    }
    for (const effect of tr.effects) {
      if (!effect.is(setMark)) continue;
      const { which, pos, text } = effect.value;
      next = { ...next, [which]: which === "error" ? (pos === null ? null : { pos, text }) : pos };
    }
    return next;
  },
  provide(field) {
    return EditorView.decorations.compute([field], function (state) {
      const value = state.field(field), ranges = [];
      const line = function (pos, cls) {
        const at = state.doc.lineAt(Math.min(pos, state.doc.length));
        ranges.push(Decoration.line({ class: cls }).range(at.from));
        return at;
      };
      if (value.step !== null) line(value.step, "cm-step-line");
      if (value.hover !== null) line(value.hover, "cm-hover-line");
      if (value.error) {
        const at = line(value.error.pos, "cm-error-line");
        // a block of its own under the line: it pushes the next lines down instead of covering them
        if (value.error.text) {
          ranges.push(Decoration.widget({ widget: new ErrorNote(value.error.text), block: true, side: 1 }).range(at.to));
        }
      }
      return Decoration.set(ranges, true);
    });
  },
});

// ---- look: the page's custom properties, so light and dark follow the page --------------------------
const look = EditorView.theme({
  "&": { height: "var(--cm-height, 100%)", color: "var(--code-ink)", backgroundColor: "var(--code-bg)", fontSize: "13px" },
  "&.cm-focused": { outline: "none" },
  ".cm-scroller": { fontFamily: "var(--mono)", lineHeight: "20px", maxHeight: "var(--cm-max-height, none)" },
  ".cm-content": { padding: "10px 0", caretColor: "var(--accent)" },
  ".cm-line": { padding: "0 12px 0 10px" },
  ".cm-cursor, .cm-dropCursor": { borderLeftColor: "var(--accent)", borderLeftWidth: "2px" },
  "&.cm-focused > .cm-scroller > .cm-selectionLayer .cm-selectionBackground, .cm-selectionBackground":
    { backgroundColor: "var(--code-selection)" },
  ".cm-gutters": { backgroundColor: "var(--gutter-bg)", color: "var(--gutter-ink)", borderRight: "1px solid var(--line)" },
  ".cm-lineNumbers .cm-gutterElement": { padding: "0 8px 0 10px", minWidth: "30px" },
  ".cm-activeLineGutter": { backgroundColor: "transparent", color: "var(--ink)", fontWeight: "600" },
  ".cm-matchingBracket": { backgroundColor: "var(--code-bracket)", outline: "1px solid var(--line-strong)" },
  ".cm-step-line": { backgroundColor: "var(--code-step)", boxShadow: "inset 3px 0 0 var(--accent)" },
  "&.ax-edited .cm-step-line": { backgroundColor: "var(--code-step-stale)", boxShadow: "inset 3px 0 0 var(--line-strong)" },
  ".cm-hover-line": { backgroundColor: "var(--hl-bg)", boxShadow: "inset 3px 0 0 var(--hl)" },
  ".cm-error-line": { backgroundColor: "var(--code-error)", boxShadow: "inset 3px 0 0 var(--error)" },
  ".cm-error-note": {
    margin: "2px 12px 4px 10px", padding: "3px 8px", borderRadius: "6px", whiteSpace: "pre-wrap",
    font: "12px/1.35 var(--sans)", color: "var(--error-ink)", backgroundColor: "var(--error-bg)",
    border: "1px solid var(--error-line)",
    contain: "inline-size", // wraps at the code's width instead of widening it to the message's
  },
});

const highlight = HighlightStyle.define([
  { tag: [t.keyword, t.controlKeyword, t.definitionKeyword, t.moduleKeyword, t.operatorKeyword], color: "var(--tok-keyword)" },
  { tag: [t.string, t.special(t.string)], color: "var(--tok-string)" },
  { tag: [t.number, t.bool, t.null], color: "var(--tok-number)" },
  { tag: [t.comment, t.lineComment], color: "var(--tok-comment)", fontStyle: "italic" },
  { tag: [t.function(t.variableName), t.function(t.propertyName), t.definition(t.function(t.variableName))], color: "var(--tok-function)" },
  { tag: [t.className, t.definition(t.className)], color: "var(--tok-class)" },
  { tag: [t.self, t.special(t.variableName)], color: "var(--tok-keyword)" },
]);

// @lezer/python 1.x reads a float with a trailing dot (`1.`, common in torch snippets) as the
// number 1 and an unfinished attribute access, so after `x = 100.` the next line was indented as a
// continuation. Outside brackets such a line is a finished statement: the next one starts where it
// started. Anything else is left to the language's own indentation.
const BRACKETS = new Set(["ArgList", "ArrayExpression", "TupleExpression", "ParenthesizedExpression",
  "DictionaryExpression", "SetExpression", "ParamList"]);
const trailingDotFloat = indentService.of(function (context, pos) {
  let line = context.lineAt(pos, -1);
  while (!line.text.trim() && line.from > 0) line = context.lineAt(line.from - 1, -1); // the last statement
  const code = line.text.replace(/\s*#.*$/, "");
  if (!/(^|[^\w.])\d[\d_]*\.$/.test(code)) return undefined;
  for (let node = syntaxTree(context.state).resolveInner(line.from + code.length, -1); node; node = node.parent) {
    if (BRACKETS.has(node.name)) return undefined;
  }
  return context.lineIndent(line.from, -1);
});

// ---- the editor ----------------------------------------------------------------------------------
export class CodeEditor {
  // `container` holds the server-rendered <textarea>; `options.onRun` runs the code (Ctrl/Cmd+Enter).
  constructor(container, options) {
    this.container = container;
    this.source = container.querySelector("textarea");
    this.listeners = [];
    this.runDoc = null; // the code of the run on screen, and the edits made since it was asked for
    this.sinceRun = null;
    const readOnly = this.source.readOnly, self = this;
    const host = document.createElement("div");
    host.className = "code-editor-host";
    // Keys typed here are the editor's: the page's own shortcuts (← → step) must not see them.
    host.addEventListener("keydown", function (event) { event.stopPropagation(); });
    const root = host.attachShadow({ mode: "open" });
    const extensions = [
      lineNumbers(), highlightActiveLineGutter(), history(), drawSelection(), indentOnInput(), bracketMatching(),
      python(), trailingDotFloat, syntaxHighlighting(highlight), indentUnit.of("    "), EditorState.tabSize.of(4), look, marks,
      // a long line wraps at the pane's width: nothing is cut off, no sideways scrolling (issue 27)
      EditorView.lineWrapping,
      Prec.highest(keymap.of([{ key: "Mod-Enter", run: function () { options.onRun(); return true; } }])),
      keymap.of([indentWithTab, ...defaultKeymap, ...historyKeymap]),
      EditorView.contentAttributes.of({
        "aria-label": this.source.getAttribute("aria-label") || "Code", "data-testid": "code",
      }),
      EditorView.updateListener.of(function (update) { if (update.docChanged) self.changed(update); }),
    ];
    if (readOnly) extensions.push(EditorState.readOnly.of(true));
    this.view = new EditorView({
      state: EditorState.create({ doc: this.source.value, extensions }), parent: root, root,
    });
    this.source.hidden = true;
    this.source.removeAttribute("data-testid");
    container.appendChild(host);
    container.classList.add("has-codemirror");
  }

  text() { return this.view.state.doc.toString(); }

  focus() { this.view.focus(); }

  // Replace the whole text as one step of the undo history (Ctrl+Z brings the old text back).
  setText(text, userEvent) {
    const doc = this.view.state.doc;
    if (doc.toString() === text) return;
    this.view.dispatch({
      changes: { from: 0, to: doc.length, insert: text }, selection: { anchor: 0 },
      userEvent: userEvent || "input.replace",
    });
    this.view.scrollDOM.scrollTop = 0; // the editor's own scroll, never the page's
  }

  onChange(listener) { this.listeners.push(listener); }

  changed(update) {
    if (this.sinceRun) this.sinceRun = this.sinceRun.compose(update.changes);
    this.markEdited();
    const text = this.text();
    this.listeners.forEach(function (listener) { listener(text); });
  }

  markEdited() {
    const edited = !!this.runDoc && !this.runDoc.eq(this.view.state.doc);
    this.view.dom.classList.toggle("ax-edited", edited);
  }

  // A run of `code` was asked for: its step lines will be numbered in it. The marks of the run on
  // screen go now, so nothing stale stays if the new run has no steps (a syntax error, a refusal).
  startRun(code) {
    const doc = this.view.state.doc;
    if (doc.toString() === code) {
      this.runDoc = doc;
      this.sinceRun = ChangeSet.empty(doc.length);
    } else {
      // The run is not of the editor's text (the first run of a page whose unrun edits came back):
      // its lines are counted in its own text, mapped onto the editor's by line number.
      this.runDoc = Text.of(code.split("\n"));
      this.sinceRun = null;
    }
    this.markEdited();
    this.view.dispatch({ effects: ["step", "hover", "error"].map(function (which) {
      return setMark.of({ which, pos: null });
    }) });
  }

  // Where line `line` (1-based, of the run's code) is in the editor now; null when it is not there.
  lineStart(line) {
    if (!line || !this.runDoc || line > this.runDoc.lines) return null;
    const doc = this.view.state.doc;
    if (!this.sinceRun) return line <= doc.lines ? doc.line(line).from : null;
    return this.sinceRun.mapPos(this.runDoc.line(line).from, 1);
  }

  mark(which, line, text) {
    const pos = this.lineStart(line);
    this.view.dispatch({ effects: setMark.of({ which, pos, text }) });
    if (which === "step" && pos !== null) this.reveal(pos);
  }

  // Scroll the editor (never the page) so the step's line is in sight.
  reveal(pos) {
    const view = this.view, scroller = view.scrollDOM;
    view.requestMeasure({
      read: function () {
        const block = view.lineBlockAt(pos), top = block.top + view.documentTop - scroller.getBoundingClientRect().top
          + scroller.scrollTop;
        return { top, bottom: top + block.height };
      },
      write: function (box) {
        if (box.top < scroller.scrollTop || box.bottom > scroller.scrollTop + scroller.clientHeight) {
          scroller.scrollTop = Math.max(0, box.top - scroller.clientHeight / 3);
        }
      },
    });
  }
}
