// Permalink tokens: raw DEFLATE of the UTF-8 code in unpadded base64url, the format
// app/web/permalink.py reads and writes, so the page, the embed and the SVG export open the same URLs.

import { withLang } from "./text.js";

function stream(bytes, transform) {
  return new Response(new Blob([bytes]).stream().pipeThrough(transform)).arrayBuffer();
}

export function encode(code) {
  return stream(new TextEncoder().encode(code), new CompressionStream("deflate-raw")).then(function (buffer) {
    const bytes = new Uint8Array(buffer);
    let binary = "";
    for (let i = 0; i < bytes.length; i++) binary += String.fromCharCode(bytes[i]);
    return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  });
}

// The code a token carries; rejects what encode() would not have made (the server then explains).
export function decode(token) {
  let binary;
  try {
    binary = atob(token.replace(/-/g, "+").replace(/_/g, "/"));
  } catch (error) {
    return Promise.reject(error);
  }
  const bytes = Uint8Array.from(binary, function (c) { return c.charCodeAt(0); });
  return stream(bytes, new DecompressionStream("deflate-raw")).then(function (buffer) {
    return new TextDecoder("utf-8", { fatal: true }).decode(buffer);
  });
}

// The page's "Run cuda on the CPU" toggle (templates/_editor.html), if it has one.
function cudaToggle() { return document.querySelector('input[name="cuda_on_cpu"]'); }

// What a permalink adds for the page's run options: `&cuda=1` when cuda runs on the CPU.
export function runOptions() {
  const toggle = cudaToggle();
  return toggle && toggle.checked ? "&cuda=1" : "";
}

// The options an address asks for, set on the page before its code runs (Back/Forward).
export function setRunOptions(params) {
  const toggle = cudaToggle();
  if (toggle) toggle.checked = params.get("cuda") === "1";
}

// The playground URL that opens `code` (and `step`, counted from 1, when given), in the page's language.
export function permalink(code, step) {
  return encode(code).then(function (token) {
    return withLang(location.origin + "/?code=" + token + runOptions() + (step ? "&step=" + step : ""));
  });
}
