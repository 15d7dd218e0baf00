// Light or dark: the reader's choice (the topbar's toggle, remembered), else the system's
// (prefers-color-scheme). Loaded in <head> without defer, so the page is drawn in its theme from
// the start; a page that fixes its theme (an embed's ?theme=) says so with data-theme-fixed.
(function () {
  "use strict";

  var KEY = "autograd-explorer:theme";
  var root = document.documentElement;
  if (root.hasAttribute("data-theme-fixed")) return;
  var system = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  var choice = null; // this page's choice, when localStorage cannot keep it

  function chosen() {
    try { return localStorage.getItem(KEY) || choice; } catch (error) { return choice; }
  }

  function current() {
    var theme = chosen();
    if (theme === "light" || theme === "dark") return theme;
    return system && system.matches ? "dark" : "light";
  }

  function apply() {
    var theme = current();
    root.setAttribute("data-theme", theme);
    var toggle = document.querySelector('[data-role="theme-toggle"]');
    if (toggle) {
      toggle.setAttribute("aria-pressed", theme === "dark" ? "true" : "false");
      toggle.title = theme === "dark" ? window.AXT.t("Switch to the light theme") : window.AXT.t("Switch to the dark theme");
    }
  }

  apply();
  if (system && system.addEventListener) system.addEventListener("change", apply);
  document.addEventListener("DOMContentLoaded", function () {
    var toggle = document.querySelector('[data-role="theme-toggle"]');
    if (!toggle) return;
    apply();
    toggle.addEventListener("click", function () {
      choice = current() === "dark" ? "light" : "dark";
      try { localStorage.setItem(KEY, choice); } catch (error) { /* kept for this page only */ }
      apply();
    });
  });
})();
