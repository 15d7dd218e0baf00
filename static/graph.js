// Autograd Explorer: the graph viewer — zoom, pan, fit, full screen, fold modes, node inspector.
//
// Gestures (wheel, pinch, drag) are d3-zoom's (served from node_modules like htmx). The drawing's
// elements are stepped by static/explorer.js through their data-k keys; this file only moves the
// camera, switches between the drawings of templates/_graph.html and fills the inspector (always
// with textContent: user strings stay text). The view keeps its zoom and position while stepping.
(function () {
  "use strict";

  var AX = (window.AX = window.AX || {});
  // Fit never draws the 12 px labels under 9 px (app/render/graph.py FOLD_BELOW): a larger drawing
  // is shown at that scale from its top, and panned; zooming out further is the reader's choice.
  var ZOOM_STEP = 1.5, PAN_STEP = 80, MAX_FIT = 1.0, MIN_FIT = 0.75;
  var lastStep = null;

  document.addEventListener("explorer:step", function (event) {
    lastStep = event.detail.step;
    // two runs on a page (bug vs fix): the graph of the run that stepped
    var own = event.detail.root && event.detail.root.querySelector('[data-role="graph"]');
    var viewer = own ? own.viewer : AX.graph;
    if (viewer) viewer.stepped(lastStep);
  });

  function Viewer(section) {
    var self = this;
    this.section = section;
    this.viewport = section.querySelector('[data-role="graph-viewport"]');
    this.svg = section.querySelector('[data-role="graph-svg"]');
    this.layer = section.querySelector('[data-role="graph-zoom"]');
    this.inspector = section.querySelector('[data-role="graph-inspector"]');
    this.data = JSON.parse(section.querySelector('script[data-role="graph-data"]').textContent);
    this.mode = section.getAttribute("data-default");
    this.inspected = null; // [unit element] while the inspector is open
    // The view's extent is its laid-out size (0 once swapped out). d3-zoom's default reads the svg's
    // width as an SVGLength, 100 %, which throws where nothing resolves it: on a run swapped out
    // before its first frame (Back and Forward in quick succession).
    this.zoom = window.d3.zoom().scaleExtent([0.02, 6]).extent(function () {
      var size = self.size();
      return [[0, 0], [size.w, size.h]];
    }).on("zoom", function (event) {
      self.transform = event.transform;
      self.layer.setAttribute("transform", event.transform.toString());
    });
    this.selection = window.d3.select(this.svg);
    this.selection.call(this.zoom).on("dblclick.zoom", null);
    this.transform = window.d3.zoomIdentity;
    this.bind();
    // The drawing must be laid out by the browser before it can be measured.
    requestAnimationFrame(function () {
      if (!self.svg.isConnected) return; // swapped out before this frame: nothing to fit
      self.shrinkToFit();
      self.fit();
    });
  }

  Viewer.prototype.drawing = function () {
    return this.section.querySelector('.drawing[data-mode="' + this.mode + '"]');
  };

  // The box of what the current step's layout holds, in drawing coordinates: the camera the server
  // computed for it (app/render/graph_draw.py), read from the drawing's <desc>, not measured: getBBox over a
  // drawing of a thousand boxes forces a layout of all of them (~0.2 s a call on a long run).
  Viewer.prototype.contentBox = function () {
    var desc = this.drawing().querySelector("desc[data-graph-camera]");
    var parts = desc ? desc.textContent.trim().split(/\s+/).map(Number) : [];
    if (parts.length !== 4 || !(parts[2] > 0 || parts[3] > 0)) return null;
    return { x: parts[0], y: parts[1], width: parts[2], height: parts[3] };
  };

  // A node's own box, from its drawn rectangle's attributes (no layout).
  function nodeBox(node) {
    var rect = node.querySelector("rect.box");
    return { x: +rect.getAttribute("x"), y: +rect.getAttribute("y"),
             width: +rect.getAttribute("width"), height: +rect.getAttribute("height") };
  }

  Viewer.prototype.size = function () {
    return { w: this.svg.clientWidth || 1, h: this.svg.clientHeight || 1 };
  };

  Viewer.prototype.fit = function (box) {
    box = box || this.contentBox();
    if (!box) return;
    var size = this.size(), pad = 16;
    var k = Math.max(MIN_FIT, Math.min((size.w - 2 * pad) / box.width, (size.h - 2 * pad) / box.height, MAX_FIT));
    // centred across (or from its left edge when wider than the view), from the top down: inputs are at the top
    var x = k * box.width <= size.w - 2 * pad ? size.w / 2 - k * (box.x + box.width / 2) : pad - k * box.x;
    var y = pad - k * box.y;
    this.selection.call(this.zoom.transform, window.d3.zoomIdentity.translate(x, y).scale(k));
  };

  // A small graph gets a short viewport (its fitted height), a large one the panel's full height.
  Viewer.prototype.shrinkToFit = function () {
    var box = this.contentBox(), size = this.size(), pad = 16;
    if (!box) return;
    var k = Math.max(MIN_FIT, Math.min((size.w - 2 * pad) / box.width, MAX_FIT));
    var wanted = Math.max(k * box.height + 2 * pad, 180);
    if (wanted < size.h) this.viewport.style.height = Math.ceil(wanted) + "px";
  };

  Viewer.prototype.zoomBy = function (factor) {
    this.selection.call(this.zoom.scaleBy, factor);
  };

  Viewer.prototype.panBy = function (dx, dy) {
    var k = this.transform.k;
    this.selection.call(this.zoom.translateBy, dx / k, dy / k);
  };

  // Keep the view while stepping; only when nothing the step shows is on screen, show it all. In a
  // backward pass the node that just ran is kept in sight: the view pans to it when it is not.
  Viewer.prototype.stepped = function (step) {
    if (this.inspected) this.renderInspector();
    var box = this.contentBox();
    if (!box) return;
    if (!this.inView(box)) this.fit();
    var ran = this.drawing().querySelector('.node[data-state~="ran"]:not([hidden])');
    if (ran) this.follow(nodeBox(ran));
  };

  Viewer.prototype.inView = function (box, margin) {
    var t = this.transform, size = this.size(), m = margin || 0;
    var x0 = t.applyX(box.x), y0 = t.applyY(box.y), x1 = t.applyX(box.x + box.width), y1 = t.applyY(box.y + box.height);
    return m ? x0 >= m && y0 >= m && x1 <= size.w - m && y1 <= size.h - m : !(x1 < 0 || y1 < 0 || x0 > size.w || y0 > size.h);
  };

  // Pan (at the same zoom) so that `box` is wholly in the view, centred, when it is not already.
  Viewer.prototype.follow = function (box) {
    if (this.inView(box, 8)) return;
    var size = this.size();
    this.selection.call(this.zoom.translateTo, box.x + box.width / 2, box.y + box.height / 2, [size.w / 2, size.h / 2]);
  };

  Viewer.prototype.setMode = function (mode, focusClass) {
    if (!this.section.querySelector('.drawing[data-mode="' + mode + '"]')) return;
    this.mode = mode;
    this.section.querySelectorAll(".drawing").forEach(function (g) {
      g.toggleAttribute("hidden", g.getAttribute("data-mode") !== mode);
    });
    this.section.querySelectorAll("[data-graph-note]").forEach(function (p) {
      p.toggleAttribute("hidden", p.getAttribute("data-graph-note") !== mode);
    });
    this.section.querySelectorAll("[data-graph-mode]").forEach(function (b) {
      b.setAttribute("aria-pressed", b.getAttribute("data-graph-mode") === mode ? "true" : "false");
    });
    this.closeInspector();
    var box = null;
    if (focusClass != null) box = this.classBox(focusClass);
    this.fit(box);
  };

  // The bounds of the members of one repetition class on screen now (after unfolding it).
  Viewer.prototype.classBox = function (klass) {
    var boxes = [];
    this.drawing().querySelectorAll('.node[data-class="' + klass + '"]:not([hidden])').forEach(function (n) {
      boxes.push(nodeBox(n));
    });
    if (!boxes.length) return null;
    var x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    boxes.forEach(function (b) {
      x0 = Math.min(x0, b.x); y0 = Math.min(y0, b.y); x1 = Math.max(x1, b.x + b.width); y1 = Math.max(y1, b.y + b.height);
    });
    return { x: x0, y: y0, width: x1 - x0, height: y1 - y0 };
  };

  Viewer.prototype.toggleWide = function (on) {
    var wide = on === undefined ? !this.section.classList.contains("graph-wide") : on;
    var size = this.size(), t = this.transform;
    var centre = [t.invertX(size.w / 2), t.invertY(size.h / 2)];
    this.section.classList.toggle("graph-wide", wide);
    document.body.classList.toggle("graph-wide-open", wide);
    var button = this.section.querySelector('[data-graph="wide"]');
    button.setAttribute("aria-pressed", wide ? "true" : "false");
    button.setAttribute("aria-label", wide ? window.AXT.t("Leave full screen") : window.AXT.t("Full screen"));
    // the same point stays in the middle of the (resized) view
    var after = this.size();
    this.selection.call(this.zoom.translateTo, centre[0], centre[1], [after.w / 2, after.h / 2]);
  };

  // ---------- the inspector ----------

  Viewer.prototype.nodeId = function (el) {
    var rep = el.querySelector("desc[data-rep]");
    return rep ? rep.textContent : el.getAttribute("data-n");
  };

  Viewer.prototype.inspect = function (el) {
    this.inspected = el;
    this.inspector.hidden = false;
    this.renderInspector();
  };

  Viewer.prototype.closeInspector = function () {
    this.inspected = null;
    this.inspector.hidden = true;
  };

  function row(list, term, text, cls) {
    var dt = document.createElement("dt");
    dt.textContent = term;
    var dd = document.createElement("dd");
    dd.textContent = text;
    if (cls) dd.className = cls;
    list.push(dt, dd);
  }

  // [kind, name]: a hook torch runs for the node, named by the snippet's function when it is one
  function hookText(hook) {
    var t = window.AXT.t;
    var kind = hook[0] === "pre" ? t("node pre-hook") : hook[0] === "post" ? t("node hook")
      : hook[0] === "post_accumulate_grad" ? t("post-accumulate-grad hook") : t("tensor hook");
    return hook[1] ? kind + " " + hook[1] : kind;
  }

  Viewer.prototype.renderInspector = function () {
    var t = window.AXT.t;
    var el = this.inspected, list = [];
    var title = this.inspector.querySelector('[data-role="gi-title"]');
    var facts = this.inspector.querySelector('[data-role="gi-facts"]');
    var run = this.section.closest('[data-role="run"]'); // its own run's step when two are shown
    var step = run && run.explorer ? run.explorer.step : lastStep != null ? lastStep : (AX.explorer ? AX.explorer.step : 0);
    var nid = this.nodeId(el), info = nid ? this.data.nodes[nid] : null;
    var count = el.querySelector("[data-unfold]");
    if (!info) {
      title.textContent = el.querySelector(".label").textContent;
      row(list, t("what"), el.querySelector("title").textContent);
      facts.replaceChildren.apply(facts, list);
      return;
    }
    title.textContent = info[0].split("::").pop();
    row(list, t("name"), info[0]);
    if (info[1]) row(list, t("created"), t("line {line}", { line: info[1] }));
    if (count && count.textContent) {
      row(list, t("folded"), t("{count} alike on screen; this is the latest", { count: count.textContent.replace("×", "") }));
    }
    var index = AX.at ? AX.at(info[2], step) : undefined;
    if (index === undefined) {
      row(list, t("now"), t("does not exist at this step"));
    } else {
      var entry = this.data.facts[index];
      var next = entry[0].map(function (n) { return n[1]; });
      row(list, "next_functions", next.length ? next.join(", ") : t("none"));
      if (!entry[1].length) row(list, t("saved tensors"), t("none"));
      entry[1].forEach(function (s) {
        // [name, tensor, label, saved at version, version now, state, torch's message]
        var versions = s[3] == null ? "" : s[4] == null ? t("saved at version {saved}", { saved: s[3] })
          : t("saved at version {saved}, now {now}", { saved: s[3], now: s[4] });
        var status = s[5] === "freed" ? t("freed (backward released it)")
          : s[5] === "modified" ? t("modified in place since it was saved") : "";
        var text = s[2] + (versions ? " · " + versions : "") + (status ? " · " + status : "");
        row(list, t("saved {name}", { name: s[0] }), text, s[5] ? "gi-" + s[5] : "");
        if (s[6]) row(list, "", s[6], "gi-message");
      });
      var keys = entry[2] || [], hooks = entry[3] || [];
      row(list, t("metadata keys"), keys.length ? keys.length + ": " + keys.join(", ") : t("none"));
      row(list, t("hooks"), hooks.length ? hooks.length + ": " + hooks.map(hookText).join(", ") : t("none"));
    }
    facts.replaceChildren.apply(facts, list);
  };

  // ---------- events ----------

  Viewer.prototype.bind = function () {
    var self = this, section = this.section;
    section.addEventListener("click", function (event) {
      var button = event.target.closest("[data-graph], [data-graph-mode], [data-role='gi-close']");
      if (button) {
        var what = button.getAttribute("data-graph");
        if (what === "zoom-in") self.zoomBy(ZOOM_STEP);
        else if (what === "zoom-out") self.zoomBy(1 / ZOOM_STEP);
        else if (what === "fit") self.fit();
        else if (what === "wide") self.toggleWide();
        else if (button.hasAttribute("data-graph-mode")) self.setMode(button.getAttribute("data-graph-mode"));
        else self.closeInspector();
        return;
      }
      var unfold = event.target.closest("[data-unfold]");
      if (unfold && section.getAttribute("data-unfolds") !== "no") { // unfolded drawn (app/render/graph.py)
        var klass = unfold.closest(".node").getAttribute("data-class");
        self.setMode("all", klass);
        return;
      }
      if (event.target.closest(".chip[data-t]")) return; // explorer.js selects the saved tensor
      var node = event.target.closest(".node");
      if (node && !node.hasAttribute("data-t")) self.inspect(node);
    });
    section.addEventListener("keydown", function (event) {
      if (event.altKey || event.ctrlKey || event.metaKey) return;
      var node = event.target.closest && event.target.closest(".node");
      if (node && (event.key === "Enter" || event.key === " ")) {
        event.preventDefault();
        var run = section.closest('[data-role="run"]'), explorer = (run && run.explorer) || AX.explorer;
        if (node.hasAttribute("data-t")) explorer && explorer.select(node.getAttribute("data-t"));
        else self.inspect(node);
        return;
      }
      if (event.target !== self.viewport) return;
      var handled = true;
      switch (event.key) {
        case "ArrowLeft": self.panBy(PAN_STEP, 0); break;
        case "ArrowRight": self.panBy(-PAN_STEP, 0); break;
        case "ArrowUp": self.panBy(0, PAN_STEP); break;
        case "ArrowDown": self.panBy(0, -PAN_STEP); break;
        case "+": case "=": self.zoomBy(ZOOM_STEP); break;
        case "-": case "_": self.zoomBy(1 / ZOOM_STEP); break;
        case "0": self.fit(); break;
        default: handled = false;
      }
      if (handled) {
        event.preventDefault();
        event.stopPropagation(); // the arrows pan here; elsewhere they step (explorer.js)
      }
    });
  };

  // Escape closes the inspector, then full screen, of the graph on screen. One listener for the page:
  // one per viewer kept every run's viewer, and the drawing it holds, alive after it was swapped out.
  document.addEventListener("keydown", function (event) {
    var viewer = AX.graph;
    if (event.key !== "Escape" || !viewer) return;
    if (viewer.inspected) viewer.closeInspector();
    else if (viewer.section.classList.contains("graph-wide")) viewer.toggleWide(false);
  });

  function setup(el) {
    var sections = el.matches && el.matches('[data-role="graph"]') ? [el] : el.querySelectorAll ? el.querySelectorAll('[data-role="graph"]') : [];
    Array.prototype.forEach.call(sections, function (section) { // two in the bug-vs-fix view
      if (section.viewer || !window.d3) return;
      document.body.classList.remove("graph-wide-open");
      section.viewer = AX.graph = new Viewer(section);
    });
  }

  if (window.htmx) window.htmx.onLoad(setup);
  else document.addEventListener("DOMContentLoaded", function () { setup(document.body); });
})();
