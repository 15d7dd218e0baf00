// The page's text for its scripts: the server hands the translations of every string the scripts
// ask for in <script type="application/json" id="i18n-data"> (app.i18n.js_catalog: the same Babel
// catalog as the templates). t("English text", {name: value}) answers the translation, or the
// English when there is none (English pages carry no strings at all); tn(singular, plural, n, params)
// picks the plural form. {name} in a string is a value filled in here. Loaded first, not deferred.
(function () {
  "use strict";

  var data = null;

  function catalog() {
    if (data) return data;
    var block = document.getElementById("i18n-data");
    try { data = block ? JSON.parse(block.textContent) : {}; } catch (error) { data = {}; }
    if (!data || typeof data !== "object") data = {};
    if (!data.messages) data.messages = {};
    return data;
  }

  function fill(text, params) {
    if (!params) return text;
    return text.replace(/\{(\w+)\}/g, function (whole, name) {
      return Object.prototype.hasOwnProperty.call(params, name) ? String(params[name]) : whole;
    });
  }

  function t(msgid, params) {
    var found = catalog().messages[msgid];
    return fill(typeof found === "string" && found ? found : msgid, params);
  }

  function tn(singular, plural, n, params) {
    var forms = catalog().messages[singular];
    var text;
    if (Array.isArray(forms) && forms.length) {
      // English and Chinese are the languages: Chinese has one form, English two (n === 1 or not).
      text = forms.length === 1 ? forms[0] : forms[n === 1 ? 0 : Math.min(1, forms.length - 1)];
    } else {
      text = n === 1 ? singular : plural;
    }
    return fill(text, Object.assign({ n: n }, params || {}));
  }

  function lang() {
    return catalog().locale || document.documentElement.lang || "en";
  }

  // A number as the page's language writes it (grouping), for counts the scripts show.
  function number(value) {
    try { return Number(value).toLocaleString(lang()); } catch (error) { return String(value); }
  }

  // Every request the page makes carries the page's language (lang=, which the server reads before the
  // cookie and Accept-Language: app/web/locale.py), so a run is drawn in the language of the page
  // around it, whatever the browser's own language says (issue 27).
  function request(url) {
    if (/[?&]lang=/.test(url)) return url;
    return url + (url.indexOf("?") < 0 ? "?" : "&") + "lang=" + encodeURIComponent(lang());
  }
  document.addEventListener("htmx:configRequest", function (event) { event.detail.path = request(event.detail.path); });

  window.AXT = { t: t, tn: tn, lang: lang, number: number, request: request };
})();
