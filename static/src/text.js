// The page's text (static/i18n.js, loaded before this bundle, holds the translations): t("English",
// {name: value}), tn(singular, plural, n). Babel finds these calls for the catalog (babel.cfg).
const AXT = window.AXT || { t: function (s) { return s; }, tn: function (s, p, n) { return n === 1 ? s : p; },
  lang: function () { return "en"; } };

export const t = AXT.t;
export const tn = AXT.tn;

// `url` with the page's language in it, so a link made here opens in the language it was made in
// (English, the default, needs no parameter).
export function withLang(url) {
  const lang = AXT.lang();
  if (!lang || lang === "en") return url;
  return url + (url.indexOf("?") < 0 ? "?" : "&") + "lang=" + encodeURIComponent(lang);
}
