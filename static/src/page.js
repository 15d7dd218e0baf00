// The page's own script, bundled with CodeMirror by esbuild (npm run build → static/build/page.js,
// run by scripts/setup). Used by the playground (/) and by the embed (/embed): the editor and the
// run's line marks everywhere; examples, history, drafts, Share and the resizable split on the
// playground only. Exposes window.AX: encode/decode/permalink/copy (embed.js, embed-dialog.js) and
// `editor` (the tests read the code through AX.editor.text()).
import { CodeEditor } from "./editor.js";
import { Draft } from "./draft.js";
import { Gallery } from "./gallery.js";
import { Navigation } from "./navigation.js";
import { decode, encode, permalink } from "./permalink.js";
import { Runs } from "./runs.js";
import { Share } from "./share.js";
import { Split } from "./split.js";
import { withLang } from "./text.js";
import { $, copy } from "./ui.js";

const AX = (window.AX = window.AX || {});
Object.assign(AX, { encode, decode, permalink, copy });

function playground(editor, runs) {
  const data = document.getElementById("gallery-data");
  const examples = data ? JSON.parse(data.textContent) : [];
  let navigation = null;
  const edited = function (text) { return !navigation || text !== navigation.entryCode; };
  const select = $("gallery");
  const gallery = select ? new Gallery(select, examples, editor, edited) : { showCode() {} };
  navigation = new Navigation(editor, runs, examples, gallery);
  gallery.onPick = function (example) {
    navigation.push(example.code, withLang("/?example=" + encodeURIComponent(example.slug)));
    runs.submit({});
  };
  new Draft(editor, runs, function () { return navigation.entryCode; });
  const share = $("share"), shareDialog = $("share-dialog");
  if (share && shareDialog) new Share(share, shareDialog, editor);
  const separator = $("splitter");
  if (separator) new Split(separator, separator.closest(".workspace"), $("editor-pane"));
}

function start() {
  const container = $("editor"), form = document.getElementById("editor-form");
  if (!container || !form) return;
  let runs = null;
  const editor = (AX.editor = new CodeEditor(container, { onRun: function () { runs.submit({}); } }));
  runs = new Runs(form, editor);
  if (!AX.embed) playground(editor, runs);
}

// A deferred script: the document is parsed, and htmx has not yet fired the page's first run.
start();
