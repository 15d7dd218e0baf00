// Autograd Explorer: step through a run, highlight one tensor everywhere, show its facts.
//
// The fragment htmx swaps in (templates/_run.html) holds every element any step shows, and a JSON
// payload of runs: per element key k, [first, last, value] ranges of steps for its visibility,
// text and state (see app/render/tracks.py). Switching steps only toggles `hidden`, sets
// textContent and data-state: never innerHTML, so user strings stay text.
(function () {
  "use strict";

  var AX = (window.AX = window.AX || {});
  var current = null;

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
    this.els = new Map();
    this.byTensor = new Map();
    this.hovered = null;
    this.selected = null;
    this.shown = new Map(); // what the DOM shows now: k -> [visible, text, state]
    this.ui = {
      slider: root.querySelector('[data-role="slider"]'),
      label: root.querySelector('[data-role="step-label"]'),
      stdout: root.querySelector('[data-role="stdout"]'),
      detail: root.querySelector('[data-role="detail"]'),
      facts: root.querySelector('[data-role="facts"]'),
      detailTitle: root.querySelector('[data-role="detail-title"]'),
      detailEmpty: root.querySelector('[data-role="detail-empty"]'),
    };
    this.index();
    this.bind();
    this.go(data.initial, true);
    emit("explorer:error", data.errorLine ? { line: data.errorLine, text: data.errorText } : null);
  }

  Explorer.prototype.index = function () {
    var self = this;
    this.root.querySelectorAll("[data-k]").forEach(function (el) {
      var k = +el.getAttribute("data-k");
      var list = self.els.get(k);
      if (list) list.push(el); else self.els.set(k, [el]);
    });
    this.root.querySelectorAll("[data-t]").forEach(function (el) {
      var t = el.getAttribute("data-t");
      var list = self.byTensor.get(t);
      if (list) list.push(el); else self.byTensor.set(t, [el]);
    });
    // touched[s]: keys whose state may differ between steps s-1 and s, so a single step is cheap.
    var touched = [];
    for (var s = 0; s <= this.count; s++) touched.push([]);
    var all = new Set();
    [this.vis, this.text, this.state].forEach(function (tracks) {
      tracks.forEach(function (runs, k) {
        all.add(k);
        for (var i = 0; i < runs.length; i++) {
          if (runs[i][0] > 0) touched[runs[i][0]].push(k);
          if (runs[i][1] + 1 < self.count) touched[runs[i][1] + 1].push(k);
        }
      });
    });
    this.touched = touched;
    this.all = Array.from(all);
  };

  Explorer.prototype.update = function (k, step) {
    var els = this.els.get(k);
    if (!els) return;
    var was = this.shown.get(k) || [null, null, null];
    var vis = this.vis.get(k), text = this.text.get(k), state = this.state.get(k), i;
    if (vis) {
      var show = at(vis, step) !== undefined;
      if (show !== was[0]) for (i = 0; i < els.length; i++) els[i].toggleAttribute("hidden", !show);
      was[0] = show;
    }
    if (text) {
      var value = at(text, step);
      if (value === undefined) value = "";
      if (value !== was[1]) {
        for (i = 0; i < els.length; i++) {
          if (els[i].hasAttribute("data-camera")) this.camera(els[i], value);
          else els[i].textContent = value;
        }
      }
      was[1] = value;
    }
    if (state) {
      var words = at(state, step) || "";
      if (words !== was[2]) for (i = 0; i < els.length; i++) els[i].setAttribute("data-state", words);
      was[2] = words;
    }
    this.shown.set(k, was);
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
    var keys = !full && Math.abs(step - this.step) === 1 ? this.touched[Math.max(step, this.step)] : this.all;
    for (var i = 0; i < keys.length; i++) this.update(keys[i], step);
    this.step = step;
    var ui = this.ui, data = this.data;
    if (ui.slider) ui.slider.value = String(step);
    if (ui.label) ui.label.textContent = "Step " + (step + 1) + " of " + this.count + " · line " + data.lines[step];
    if (ui.stdout) {
      var out = data.stdout.slice(0, data.stdoutAt[step]);
      if (ui.stdout.textContent !== out) ui.stdout.textContent = out;
    }
    this.renderDetail();
    emit("explorer:step", { line: data.lines[step], step: step });
  };

  // One thing, one highlight: the tensor under the pointer (else the selected one) lights up in
  // both views and in the variables bar; its creation line lights up in the editor.
  Explorer.prototype.setClass = function (tid, name, on) {
    var els = tid ? this.byTensor.get(tid) : null;
    if (!els) return;
    for (var i = 0; i < els.length; i++) els[i].classList.toggle(name, on);
  };

  Explorer.prototype.hover = function (tid) {
    if (tid === this.hovered) return;
    this.setClass(this.hovered, "hl", false);
    this.hovered = tid;
    this.setClass(tid, "hl", true);
    this.renderDetail();
  };

  // A grad_fn node lights up the tensors it saved (the memory it keeps alive) and its line.
  Explorer.prototype.hoverNode = function (node) {
    var self = this, saved = node ? (node.getAttribute("data-saved") || "").split(" ").filter(Boolean) : [];
    (this.nodeSaved || []).forEach(function (t) { self.setClass(t, "hl", false); });
    this.nodeSaved = saved;
    saved.forEach(function (t) { self.setClass(t, "hl", true); });
    if (node && !this.focusTensor()) emit("explorer:focus", { line: this.data.born[node.getAttribute("data-n")] || null });
    else if (!node) this.renderDetail();
  };

  Explorer.prototype.select = function (tid) {
    this.setClass(this.selected, "sel", false);
    this.selected = tid === this.selected ? null : tid;
    this.setClass(this.selected, "sel", true);
    this.renderDetail();
  };

  Explorer.prototype.focusTensor = function () {
    return this.hovered || this.selected;
  };

  Explorer.prototype.renderDetail = function () {
    var ui = this.ui, tid = this.focusTensor();
    if (!ui.facts) return;
    var born = tid ? this.data.born[tid] : null;
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
    var runs = this.data.details[tid];
    var index = runs ? at(runs, this.step) : undefined;
    var rows = [];
    if (index === undefined) {
      ui.detailTitle.textContent = tid;
      rows.push(["", tid + " does not exist at this step" + (born ? " (it appears at line " + born + ")." : ".")]);
    } else {
      var facts = this.data.facts[index];
      ui.detailTitle.textContent = facts[0][1];
      rows = facts.slice(1);
    }
    var nodes = [];
    rows.forEach(function (pair) {
      var dt = document.createElement("dt");
      dt.textContent = pair[0];
      var dd = document.createElement("dd");
      dd.textContent = pair[1];
      if (pair[0] === "values") dd.className = "values";
      nodes.push(dt, dd);
    });
    ui.facts.replaceChildren.apply(ui.facts, nodes);
  };

  Explorer.prototype.bind = function () {
    var self = this, root = this.root;
    root.addEventListener("click", function (event) {
      var button = event.target.closest("[data-step]");
      if (button) {
        var where = button.getAttribute("data-step");
        var to = { first: 0, prev: self.step - 1, next: self.step + 1, last: self.count - 1 }[where];
        self.go(to);
        return;
      }
      var target = event.target.closest("[data-t]");
      if (target) self.select(target.getAttribute("data-t"));
    });
    root.addEventListener("mouseover", function (event) {
      var target = event.target.closest("[data-t]");
      self.hover(target ? target.getAttribute("data-t") : null);
      var node = target ? null : event.target.closest("[data-n]");
      if (node !== self.nodeHovered) { self.nodeHovered = node; self.hoverNode(node); }
    });
    root.addEventListener("mouseleave", function () {
      self.hover(null);
      self.nodeHovered = null;
      self.hoverNode(null);
    });
    if (this.ui.slider) {
      this.ui.slider.addEventListener("input", function () { self.go(+self.ui.slider.value); });
    }
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
    var moves = { ArrowLeft: current.step - 1, ArrowRight: current.step + 1, Home: 0, End: current.count - 1 };
    if (!(event.key in moves)) return;
    if (event.target.type === "range") return; // the slider moves itself and fires "input"
    event.preventDefault();
    current.go(moves[event.key]);
  });

  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && current && current.selected) current.select(current.selected);
  });

  function setup(el) {
    var root = el.matches && el.matches('[data-role="run"]') ? el : el.querySelector && el.querySelector('[data-role="run"]');
    if (!root || root.explorer) return;
    root.explorer = current = new Explorer(root);
    AX.explorer = current;
    AX.runs = (AX.runs || 0) + 1; // tests wait on this to know a new run is on screen
  }

  // Tests and the benchmark drive the explorer through this, as a user would through the buttons.
  AX.go = function (step) { if (current) current.go(step); };
  AX.at = at;

  if (window.htmx) window.htmx.onLoad(setup);
  else document.addEventListener("DOMContentLoaded", function () { setup(document.body); });
})();
