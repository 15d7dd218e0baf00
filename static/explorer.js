// Autograd Explorer: step through a run, highlight one tensor everywhere, show its facts.
//
// The fragment htmx swaps in (templates/_run.html) holds every element any step shows, and a JSON
// payload of runs: per element key k, [first, last, value] ranges of steps for its visibility,
// text, state and tensor (see app/render/tracks.py). Switching steps only toggles `hidden`, sets
// textContent, data-state and data-t: never innerHTML, so user strings stay text. Only the keys
// whose runs start or end between the two steps are touched, so a switch costs what changed.
(function () {
  "use strict";

  var AX = (window.AX = window.AX || {});
  var current = null;
  var LIST_MAX = 200; // an expanded fold lists this many members, then says how many more
  var TENSOR_ID = /^[a-z]\d+$/;
  var t = window.AXT.t; // the page's language (static/i18n.js)

  // The value a run list holds at `step`: runs are sorted [first, last, value] (value may be absent).
  function at(runs, step) {
    var lo = 0, hi = runs.length - 1;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1, run = runs[mid];
      if (step < run[0]) hi = mid - 1;
      else if (step > run[1]) lo = mid + 1;
      else return run.length > 2 ? run[2] : 1;
    }
    return undefined;
  }

  function emit(name, detail) {
    document.dispatchEvent(new CustomEvent(name, { detail: detail }));
  }

  function Explorer(root) {
    var data = JSON.parse(root.querySelector('script[data-role="run-data"]').textContent);
    this.root = root;
    this.data = data;
    this.count = data.count;
    this.code = data.code;
    this.step = -1;
    this.vis = new Map(data.vis);
    this.text = new Map(data.text);
    this.state = new Map(data.state);
    this.ref = new Map(data.ref);
    this.folds = new Map(data.folds);
    this.els = new Map();
    this.hovered = null;
    this.selected = null;
    this.lit = { hl: [], sel: [] }; // the elements each highlight is on now
    this.open = []; // fold lists on screen
    this.shown = new Map(); // what the DOM shows now: k -> [visible, text, state, ref]
    this.ui = {
      slider: root.querySelector('[data-role="slider"]'),
      label: root.querySelector('[data-role="step-label"]'),
      stdout: root.querySelector('[data-role="stdout"]'),
      detail: root.querySelector('[data-role="detail"]'),
      facts: root.querySelector('[data-role="facts"]'),
      detailTitle: root.querySelector('[data-role="detail-title"]'),
      detailEmpty: root.querySelector('[data-role="detail-empty"]'),
      phase: root.querySelector('[data-role="step-phase"]'),
      into: root.querySelector('[data-step="into"]'),
      out: root.querySelector('[data-step="out"]'),
    };
    this.indexPasses(data.passes || []);
    this.index();
    this.bind();
    this.prime(data.initial);
    this.go(data.initial, true);
    emit("explorer:error", data.errorLine ? { line: data.errorLine, text: data.errorText } : null);
  }

  Explorer.prototype.index = function () {
    var self = this, count = this.count;
    this.root.querySelectorAll("[data-k]").forEach(function (el) {
      var k = +el.getAttribute("data-k");
      if (el.hasAttribute("data-cells")) {
        el._cells = el.querySelectorAll(".cell b");
        el._from = +el.getAttribute("data-cells");
      } else if (el.hasAttribute("data-grid")) { // a 2-D tensor's grid: cell i shows storage cell _map[i]
        el._cells = el.querySelectorAll("td b");
        el._map = el.getAttribute("data-grid").split(" ").map(Number);
      }
      el._ref = "data-" + (el.getAttribute("data-ref") || "t");
      var list = self.els.get(k);
      if (list) list.push(el); else self.els.set(k, [el]);
    });
    // Which keys change between step s-1 and s, as one flat array cut by step (offsets[s] ..
    // offsets[s+1]): sized by the runs, not by steps × keys.
    var counts = new Int32Array(count + 1), all = new Set(), tracks = [this.vis, this.text, this.state, this.ref];
    function each(visit) {
      tracks.forEach(function (track) {
        track.forEach(function (runs, k) {
          for (var i = 0; i < runs.length; i++) {
            if (runs[i][0] > 0) visit(runs[i][0], k);
            if (runs[i][1] + 1 < count) visit(runs[i][1] + 1, k);
          }
        });
      });
    }
    tracks.forEach(function (track) { track.forEach(function (runs, k) { all.add(k); }); });
    each(function (s) { counts[s]++; });
    var offsets = new Int32Array(count + 2);
    for (var s = 0; s <= count; s++) offsets[s + 1] = offsets[s] + counts[s];
    var fill = offsets.slice(0, count + 1), keys = new Int32Array(offsets[count + 1]);
    each(function (s, k) { keys[fill[s]++] = k; });
    this.offsets = offsets;
    this.changed = keys;
    this.all = Int32Array.from(all);
  };

  // The server rendered the fragment at the initial step (app/render: frame_at): note what each
  // element shows there without touching the DOM, so the first step writes nothing it need not.
  Explorer.prototype.prime = function (step) {
    for (var i = 0; i < this.all.length; i++) {
      var k = this.all[i], vis = this.vis.get(k), text = this.text.get(k), state = this.state.get(k);
      var ref = this.ref.get(k), value = text ? at(text, step) : undefined;
      this.shown.set(k, [vis ? at(vis, step) !== undefined : null, text ? (value === undefined ? "" : value) : null,
                         state ? at(state, step) || "" : null, ref ? at(ref, step) || null : null]);
    }
  };

  Explorer.prototype.update = function (k, step) {
    var els = this.els.get(k);
    if (!els) return;
    var was = this.shown.get(k);
    if (!was) this.shown.set(k, (was = [null, null, null, null]));
    var vis = this.vis.get(k), text = this.text.get(k), state = this.state.get(k), ref = this.ref.get(k), i;
    if (vis) {
      var show = at(vis, step) !== undefined;
      if (show !== was[0]) for (i = 0; i < els.length; i++) els[i].toggleAttribute("hidden", !show);
      was[0] = show;
    }
    if (text) {
      var value = at(text, step);
      if (value === undefined) value = "";
      if (value !== was[1]) for (i = 0; i < els.length; i++) this.setText(els[i], value);
      was[1] = value;
    }
    if (state) {
      var words = at(state, step) || "";
      if (words !== was[2]) for (i = 0; i < els.length; i++) this.setState(els[i], words);
      was[2] = words;
    }
    if (ref) {
      var tid = at(ref, step) || null;
      if (tid !== was[3]) {
        for (i = 0; i < els.length; i++) {
          if (tid) els[i].setAttribute(els[i]._ref, tid); else els[i].removeAttribute(els[i]._ref);
        }
        this.moved = true;
      }
      was[3] = tid;
    }
  };

  // A strip's cells share one text (their values, space-separated) and one state (the indices of
  // the cells that just changed).
  Explorer.prototype.setText = function (el, value) {
    if (el._cells) {
      var values = value.split(" ");
      for (var i = 0; i < el._cells.length; i++) el._cells[i].textContent = values[this.cellOf(el, i)] || "";
    } else if (el.hasAttribute("data-camera")) this.camera(el, value);
    else el.textContent = value;
  };

  Explorer.prototype.setState = function (el, words) {
    if (!el._cells) { el.setAttribute("data-state", words); return; }
    var changed = new Set(words ? words.split(" ").map(Number) : []);
    for (var i = 0; i < el._cells.length; i++) {
      el._cells[i].setAttribute("data-state", changed.has(this.cellOf(el, i)) ? "changed" : "");
    }
  };

  // The storage cell the i-th drawn cell of a strip line (or of a tensor's grid) shows.
  Explorer.prototype.cellOf = function (el, i) {
    return el._map ? el._map[i] : el._from + i;
  };

  // Pointing at a storage cell (in its strip or in a tensor's grid) marks it and every grid cell
  // that reads it: where a transposed view's [r, c] lives, and which elements share one cell.
  Explorer.prototype.point = function (cell) {
    var strip = cell && cell.closest(".strip"), c = cell && cell.getAttribute("data-c");
    if (this.pointed) this.pointed.forEach(function (el) { el.classList.remove("pointed"); });
    this.pointed = strip ? Array.prototype.slice.call(strip.querySelectorAll('[data-c="' + c + '"]')) : null;
    if (this.pointed) this.pointed.forEach(function (el) { el.classList.add("pointed"); });
  };

  Explorer.prototype.camera = function (svg, box) {
    if (!box) return;
    var parts = box.split(" ");
    svg.setAttribute("viewBox", box);
    svg.setAttribute("width", parts[2]);
    svg.setAttribute("height", parts[3]);
  };

  Explorer.prototype.go = function (step, full) {
    if (!this.count) return;
    step = Math.max(0, Math.min(this.count - 1, step));
    if (step === this.step && !full) return;
    var i, lo = Math.min(step, this.step), hi = Math.max(step, this.step), off = this.offsets;
    this.moved = false;
    if (full || off[hi + 1] - off[lo + 1] > this.all.length) {
      for (i = 0; i < this.all.length; i++) this.update(this.all[i], step);
    } else {
      for (i = off[lo + 1]; i < off[hi + 1]; i++) this.update(this.changed[i], step);
    }
    this.step = step;
    var ui = this.ui, data = this.data;
    if (ui.slider) ui.slider.value = String(step);
    if (ui.label) ui.label.textContent = this.label(step);
    if (ui.stdout) {
      var out = data.stdout.slice(0, this.printed(step));
      if (ui.stdout.textContent !== out) ui.stdout.textContent = out;
    }
    this.showPass(step);
    if (this.moved) this.relight();
    for (i = 0; i < this.open.length; i++) this.renderFold(this.open[i]);
    this.renderDetail();
    emit("explorer:step", { line: data.lines[step], step: step, root: this.root });
  };

  // What the state shown is (app/render/explorer.py step_label writes the same).
  Explorer.prototype.label = function (step) {
    if (!this.backwardSteps) {
      this.backwardSteps = new Set(this.data.backward || []);
      this.loopEnds = new Set(this.data.loopEnds || []);
    }
    var t = window.AXT.t, parts = { n: step + 1, count: this.count, line: this.data.lines[step] };
    if (this.backwardSteps.has(step)) return t("Step {n} of {count} · line {line}, inside its backward pass", parts);
    if (this.loopEnds.has(step)) return t("Step {n} of {count} · the loop at line {line} ended", parts);
    return t("Step {n} of {count} · after line {line} ran", parts);
  };

  // Length of the output printed up to `step` (the payload lists where it grew).
  Explorer.prototype.printed = function (step) {
    var grew = this.data.stdoutGrew, lo = 0, hi = grew.length - 1, found = 0;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (grew[mid][0] <= step) { found = grew[mid][1]; lo = mid + 1; } else hi = mid - 1;
    }
    return found;
  };

  // One thing, one highlight: the tensor under the pointer (else the selected one) lights up in
  // both views, the variables bar and the fold lists; its creation line lights up in the editor.
  // Elements change the tensor they stand for as the steps go, so it is looked up when it changes.
  Explorer.prototype.find = function (tids) {
    var root = this.root, found = [];
    tids.forEach(function (tid) {
      if (tid && TENSOR_ID.test(tid)) found.push.apply(found, root.querySelectorAll('[data-t="' + tid + '"]'));
    });
    return found;
  };

  // "hl": the hovered tensor (or the tensors a hovered grad_fn saved); "sel": the selected one.
  Explorer.prototype.light = function (name, tids) {
    var lit = this.lit[name], i;
    for (i = 0; i < lit.length; i++) lit[i].classList.remove(name);
    lit = this.lit[name] = this.find(tids);
    for (i = 0; i < lit.length; i++) lit[i].classList.add(name);
  };

  Explorer.prototype.relight = function () {
    this.light("hl", [this.hovered].concat(this.nodeSaved || []));
    this.light("sel", [this.selected]);
  };

  Explorer.prototype.hover = function (tid) {
    if (tid === this.hovered) return;
    this.hovered = tid;
    this.relight();
    this.renderDetail();
  };

  // A grad_fn node lights up the tensors it saved (the memory it keeps alive) and its line.
  Explorer.prototype.hoverNode = function (node) {
    this.nodeSaved = node ? (node.getAttribute("data-saved") || "").split(" ").filter(Boolean) : [];
    this.relight();
    if (node && !this.focusTensor()) emit("explorer:focus", { line: this.data.born[node.getAttribute("data-n")] || null });
    else if (!node) this.renderDetail();
  };

  Explorer.prototype.select = function (tid) {
    this.selected = tid === this.selected ? null : tid;
    this.light("sel", [this.selected]);
    this.renderDetail();
  };

  Explorer.prototype.focusTensor = function () {
    return this.hovered || this.selected;
  };

  Explorer.prototype.renderDetail = function () {
    var ui = this.ui, tid = this.focusTensor(), data = this.data;
    if (!ui.facts) return;
    var born = tid ? data.born[tid] : null;
    emit("explorer:focus", { line: born || null });
    if (!tid) {
      ui.facts.replaceChildren();
      ui.detailTitle.textContent = "";
      ui.detailEmpty.hidden = false;
      ui.detail.removeAttribute("data-tensor");
      return;
    }
    ui.detailEmpty.hidden = true;
    ui.detail.setAttribute("data-tensor", tid);
    var runs = data.details[tid];
    var index = runs ? at(runs, this.step) : undefined;
    var rows = [];
    if (index === undefined) {
      ui.detailTitle.textContent = "";
      rows.push(["", born ? t("This tensor does not exist at this step (it appears at line {line}).", { line: born })
                          : t("This tensor does not exist at this step.")]);
    } else {
      rows = data.facts[index].map(function (i) { return data.pairs[i]; });
      ui.detailTitle.textContent = rows[0][1];
      rows = rows.slice(1);
    }
    var nodes = [];
    rows.forEach(function (pair) {
      var dt = document.createElement("dt");
      dt.textContent = pair[0];
      var dd = document.createElement("dd");
      dd.textContent = pair[1];
      if (pair[0] === t("values")) { // the row's label, in the page's language
        dd.className = "values";
        dd.tabIndex = 0; // a long row scrolls sideways: the keyboard must reach it too
      }
      nodes.push(dt, dd);
    });
    ui.facts.replaceChildren.apply(ui.facts, nodes);
    this.dock();
  };

  // The docked facts never cover the tensor they describe: of the window's four corners (bottom right,
  // bottom left, top right, top left) the first where the panel covers nothing of the element pointed
  // at or focused, and the least of the tensor's other elements on screen (a chip, a graph box). One
  // layout read for the panel: its size.
  var CORNERS = ["br", "bl", "tr", "tl"], GAP = 16, POINTED = 1e9;
  Explorer.prototype.dock = function () {
    var panel = this.ui.detail, lit = this.lit.hl.length ? this.lit.hl : this.lit.sel;
    if (!panel.hasAttribute("data-tensor")) return;
    var vw = innerWidth, vh = innerHeight, rects = [], pointed = this.pointedEl;
    var add = function (el, weight) {
      var r = el.getBoundingClientRect();
      if (!r.width && !r.height) { // a memory row is display: contents: its cells are its boxes
        for (var c = 0; c < el.children.length; c++) add(el.children[c], weight);
      } else if (r.bottom > 0 && r.top < vh && r.right > 0 && r.left < vw) rects.push([r, weight]);
    };
    for (var i = 0; i < lit.length; i++) add(lit[i], 1);
    if (pointed && pointed.isConnected) add(pointed, POINTED);
    var size = panel.getBoundingClientRect(), top = stickTop() + 12, best = null, least = Infinity;
    for (var c = 0; c < CORNERS.length && least > 0; c++) {
      var corner = CORNERS[c];
      var x = corner[1] === "l" ? GAP : vw - GAP - size.width, y = corner[0] === "t" ? top : vh - GAP - size.height;
      var covered = 0;
      rects.forEach(function (pair) {
        var r = pair[0];
        covered += pair[1] * Math.max(0, Math.min(x + size.width, r.right) - Math.max(x, r.left)) *
                   Math.max(0, Math.min(y + size.height, r.bottom) - Math.max(y, r.top));
      });
      if (covered < least) { least = covered; best = corner; }
    }
    if (panel.getAttribute("data-dock") !== best) panel.setAttribute("data-dock", best);
  };

  // A fold (a chip or a group of strips standing for many) lists its members at this step.
  Explorer.prototype.toggleFold = function (el) {
    var k = +el.getAttribute("data-fold");
    var box = this.root.querySelector('[data-fold-list="' + (el.getAttribute("data-list") || k) + '"]');
    if (!box) return;
    var opening = box.showing !== k;
    if (box.opener) box.opener.setAttribute("aria-expanded", "false");
    box.showing = opening ? k : null;
    box.opener = opening ? el : null;
    box.hidden = !opening;
    el.setAttribute("aria-expanded", String(opening));
    this.open = this.open.filter(function (b) { return b !== box; });
    if (opening) { this.open.push(box); this.renderFold(box); }
  };

  Explorer.prototype.renderFold = function (box) {
    var entries = this.folds.get(box.showing) || [], step = this.step, nodes = [], total = 0;
    for (var i = 0; i < entries.length; i++) {
      var e = entries[i];
      if (e[2] > step || e[3] < step) continue;
      if (++total > LIST_MAX) continue;
      var item = document.createElement("button");
      item.type = "button";
      item.className = "fold-item";
      item.textContent = e[0];
      if (e[1]) item.setAttribute("data-t", e[1]);
      nodes.push(item);
    }
    var head = document.createElement("p");
    head.className = "fold-head";
    var shown = total.toLocaleString("en-US");
    head.textContent = total > LIST_MAX ? t("{total} at this step, the first {max} listed", { total: shown, max: LIST_MAX })
                                        : t("{total} at this step", { total: shown });
    box.replaceChildren.apply(box, [head].concat(nodes));
    if (this.hovered || this.selected) this.relight();
  };

  Explorer.prototype.bind = function () {
    var self = this, root = this.root;
    // With two runs on a page (bug vs fix), the keys and AX.explorer act on the one last used.
    function use() { current = AX.explorer = self; }
    root.addEventListener("pointerdown", use);
    root.addEventListener("focusin", use);
    root.addEventListener("click", function (event) {
      var button = event.target.closest("[data-step]");
      if (button) {
        var where = button.getAttribute("data-step");
        var to = { first: 0, prev: self.prevStep(), next: self.nextStep(), last: self.count - 1,
                   into: self.intoStep(), out: self.outStep() }[where];
        if (to !== null && to !== undefined) self.go(to);
        return;
      }
      var target = event.target.closest("[data-t]");
      if (target) { self.select(target.getAttribute("data-t")); return; }
      var fold = event.target.closest("[data-fold]");
      if (fold) self.toggleFold(fold);
    });
    root.addEventListener("mouseover", function (event) {
      var target = event.target.closest("[data-t]");
      self.pointedEl = target;
      self.hover(target ? target.getAttribute("data-t") : null);
      var node = target ? null : event.target.closest("[data-n]");
      if (node !== self.nodeHovered) { self.nodeHovered = node; self.hoverNode(node); }
      var cell = event.target.closest("[data-c]");
      if (cell !== self.cellHovered) { self.cellHovered = cell; self.point(cell); }
    });
    root.addEventListener("mouseleave", function () {
      self.hover(null);
      self.cellHovered = null;
      self.point(null);
      self.nodeHovered = null;
      self.hoverNode(null);
    });
    // The keyboard's path to a tensor's facts: focus shows them as hovering does, Enter or Space
    // selects it as a click does (buttons click by themselves).
    root.addEventListener("focusin", function (event) {
      var target = event.target.closest && event.target.closest("[data-t]");
      if (target) self.pointedEl = target;
      if (target) self.hover(target.getAttribute("data-t"));
    });
    root.addEventListener("keydown", function (event) {
      if (event.key !== "Enter" && event.key !== " ") return;
      var target = event.target.closest && event.target.closest("[data-t]");
      if (!target || target.matches("button, a, input, [role=button]")) return;
      event.preventDefault();
      self.select(target.getAttribute("data-t"));
    });
    if (this.ui.slider) {
      this.ui.slider.addEventListener("input", function () { self.go(+self.ui.slider.value); });
    }
  };

  // Backward passes (issue 13): a line that runs backward is preceded by one step per autograd node
  // torch ran. Stepping goes over them by default (prev/next skip a pass's node steps); "Step into"
  // (i) enters them, "Step out" (o) jumps to the line's own step. passes: [first, last, own, names].
  Explorer.prototype.indexPasses = function (passes) {
    this.passes = passes;
    this.passOf = new Int32Array(this.count).fill(-1); // node step -> its pass
    for (var p = 0; p < passes.length; p++) {
      for (var s = passes[p][0]; s <= passes[p][1] && s < this.count; s++) this.passOf[s] = p;
    }
  };

  Explorer.prototype.inPass = function (step) {
    var p = step >= 0 && step < this.count ? this.passOf[step] : -1;
    return p >= 0 ? this.passes[p] : null;
  };

  Explorer.prototype.nextStep = function () {
    var s = this.step, ahead = this.inPass(s + 1);
    if (this.inPass(s) || !ahead) return s + 1;
    return ahead[2]; // over the nodes, to the line's own step
  };

  Explorer.prototype.prevStep = function () {
    var s = this.step, behind = this.inPass(s - 1);
    if (this.inPass(s) || !behind || behind[2] !== s) return s - 1;
    return Math.max(0, behind[0] - 1); // back over the nodes, to the step before the line
  };

  // Into the pass of the line shown now, or of the next line (null: neither runs backward).
  Explorer.prototype.intoStep = function () {
    var s = this.step, here = this.inPass(s - 1), ahead = this.inPass(s + 1);
    if (this.inPass(s)) return null;
    if (here && here[2] === s) return here[0];
    return ahead ? ahead[0] : null;
  };

  Explorer.prototype.outStep = function () {
    var pass = this.inPass(this.step);
    return pass ? pass[2] : null;
  };

  Explorer.prototype.showPass = function (step) {
    var ui = this.ui, pass = this.inPass(step);
    if (ui.phase) {
      var text = pass ? window.AXT.t("backward · node {n} of {count} · {name}",
        { n: step - pass[0] + 1, count: pass[3].length, name: pass[3][step - pass[0]] }) : "";
      if (ui.phase.textContent !== text) ui.phase.textContent = text;
      ui.phase.hidden = !pass;
    }
    if (ui.into) ui.into.hidden = this.intoStep() === null;
    if (ui.out) ui.out.hidden = !pass;
  };

  // The address bar (a permalink to the run's code and step) is kept by static/src/navigation.js,
  // which knows which history entry a run belongs to.

  function editing(target) {
    if (!target || !target.closest) return false;
    if (target.closest("textarea, select, [contenteditable]")) return true;
    var input = target.closest("input");
    return !!input && input.type !== "range";
  }

  document.addEventListener("keydown", function (event) {
    if (!current || editing(event.target) || event.altKey || event.ctrlKey || event.metaKey) return;
    var moves = { ArrowLeft: current.prevStep(), ArrowRight: current.nextStep(), Home: 0, End: current.count - 1,
                  i: current.intoStep(), o: current.outStep() };
    if (!(event.key in moves) || moves[event.key] === null) return;
    if (event.target.type === "range") return; // the slider moves itself and fires "input"
    event.preventDefault();
    current.go(moves[event.key]);
  });

  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && current && current.selected) current.select(current.selected);
  });

  // Where the page's sticky parts end (the top bar, the run's stepper), for the CSS that places things
  // under them (explorer.css: --topbar-h, --stepper-h), kept as they wrap or the window changes.
  function stickTop() {
    var style = document.documentElement.style;
    return (parseFloat(style.getPropertyValue("--topbar-h")) || 0) + (parseFloat(style.getPropertyValue("--stepper-h")) || 0);
  }

  function measureSticky() {
    var style = document.documentElement.style, bar = document.querySelector(".topbar");
    var stepper = document.querySelector(".workspace .run > .stepper, .embed .run > .stepper");
    var sticky = bar && getComputedStyle(bar).position === "sticky";
    // set only when they change: a custom property on the root restyles the whole page
    var values = { "--topbar-h": (sticky ? bar.offsetHeight : 0) + "px", "--stepper-h": (stepper ? stepper.offsetHeight : 0) + "px" };
    for (var name in values) if (style.getPropertyValue(name) !== values[name]) style.setProperty(name, values[name]);
  }

  var watching = null, watched = [];
  function watchSticky(root) {
    if (!window.ResizeObserver) { measureSticky(); return; }
    if (!watching) {
      watching = new ResizeObserver(measureSticky);
      var bar = document.querySelector(".topbar");
      if (bar) watching.observe(bar);
      window.addEventListener("resize", measureSticky);
    }
    watched = watched.filter(function (old) { // a run swapped out: its stepper is no longer watched
      if (!old.isConnected) watching.unobserve(old);
      return old.isConnected;
    });
    var stepper = root.querySelector(":scope > .stepper");
    if (stepper) { watching.observe(stepper); watched.push(stepper); }
    measureSticky();
  }

  function setup(el) {
    var roots = el.matches && el.matches('[data-role="run"]') ? [el] : el.querySelectorAll ? el.querySelectorAll('[data-role="run"]') : [];
    Array.prototype.forEach.call(roots, setupRun); // two in the bug-vs-fix view
  }

  function setupRun(root) {
    if (root.explorer) return;
    var started = performance.now();
    root.explorer = current = new Explorer(root);
    watchSticky(root);
    AX.setupMs = performance.now() - started; // parse, index and the first step (the benchmark reads it)
    AX.explorer = current;
    AX.runs = (AX.runs || 0) + 1; // tests wait on this to know a new run is on screen
  }

  // htmx cleans up every element it swaps out, one event each (htmx:beforeCleanupElement): a
  // Transformer's run of 18k elements cost 0.65 s before the next run could be drawn. A run's own
  // elements carry no htmx attributes (its root may: the page's first run), so they are let go at once,
  // in the same task as the swap (nothing is painted between), and htmx cleans up the root alone.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var old = event.detail.target;
    if (!event.detail.shouldSwap || !old || !old.matches || !old.matches('[data-role="run"]')) return;
    // htmx gives the new run the old one's classes until it settles, "a run is on its way" among them
    // (htmx-request, #run is an hx-indicator): it was drawn at half opacity and faded in for 0.17 s,
    // and while its opacity was under 1 the run was a stacking context under the sticky top bar,
    // with the full-screen graph and its stepper (position: fixed) shut inside it.
    old.classList.remove("htmx-request");
    if (old.querySelector("[hx-get], [hx-post], [data-hx-get], [data-hx-post], [hx-trigger]")) return;
    if (current && current.root === old) current = null;
    old.explorer = null;
    old.replaceChildren();
  });

  // Tests and the benchmark drive the explorer through this, as a user would through the buttons.
  AX.go = function (step) { if (current) current.go(step); };
  AX.at = at;

  if (window.htmx) window.htmx.onLoad(setup);
  else document.addEventListener("DOMContentLoaded", function () { setup(document.body); });
})();
