// Small page helpers shared by the playground's parts.

export function $(role, root) {
  return (root || document).querySelector('[data-role="' + role + '"]');
}

export function toast(text) {
  const el = $("toast");
  if (!el) return;
  el.textContent = text;
  el.classList.add("show");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(function () { el.classList.remove("show"); }, 2400);
}

export function copy(text) {
  if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
  // Plain http on another host: no async clipboard, fall back to a selected hidden field.
  const field = document.createElement("textarea");
  field.value = text;
  field.setAttribute("readonly", "");
  field.className = "offscreen";
  document.body.appendChild(field);
  field.select();
  const ok = document.execCommand("copy");
  field.remove();
  return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
}

// localStorage that may be missing or full (private windows, quotas): never an error for the page.
export const store = {
  get(key) {
    try { return JSON.parse(localStorage.getItem(key)); } catch (error) { return null; }
  },
  set(key, value) {
    try { localStorage.setItem(key, JSON.stringify(value)); } catch (error) { /* not kept: fine */ }
  },
  remove(key) {
    try { localStorage.removeItem(key); } catch (error) { /* nothing kept */ }
  },
};
