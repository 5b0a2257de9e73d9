// The console works without this file: every page is complete on reload.
// With it, times read as how long ago, with the time in the viewer's zone
// on hover, ids have copy buttons, and pages that show the fleet update
// themselves from the change feed.
(function () {
  "use strict";
  // ago is how long ago, or for a time ahead (a lease's expiry) how soon.
  function ago(ms) {
    var ahead = ms < 0, s = Math.round(Math.abs(ms) / 1000), n;
    if (s < 60) { n = s + "s"; } else if (s < 3600) { n = Math.floor(s / 60) + "m"; }
    else if (s < 86400) { n = Math.floor(s / 3600) + "h"; } else { n = Math.floor(s / 86400) + "d"; }
    return ahead ? "in " + n : n + " ago";
  }
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) { return; }
      el.textContent = ago(Date.now() - d.getTime());
      el.title = d.toLocaleString(undefined, { timeZoneName: "short" });
    });
  }
  localTimes(document);

  // Copy buttons (hidden without this script) put an id on the clipboard;
  // one listener on the document serves the buttons a live refresh adds.
  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    // Plain HTTP has no clipboard API: the older way still works there.
    var ta = document.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.style.position = "fixed";
    ta.style.opacity = "0";
    document.body.appendChild(ta);
    ta.select();
    var ok = document.execCommand("copy");
    document.body.removeChild(ta);
    return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }
  function showCopy(root) {
    root.querySelectorAll("button.copy[data-copy]").forEach(function (b) { b.hidden = false; });
  }
  showCopy(document);
  document.addEventListener("click", function (ev) {
    var b = ev.target.closest && ev.target.closest("button.copy[data-copy]");
    if (!b) { return; }
    copyText(b.getAttribute("data-copy")).then(function () {
      b.textContent = "Copied";
      b.setAttribute("data-copied", "1");
      setTimeout(function () { b.textContent = "Copy"; b.removeAttribute("data-copied"); }, 1500);
    }, function () { b.textContent = "Copy failed"; });
  });

  var src = document.body.getAttribute("data-live");
  if (!src || !window.EventSource || !window.fetch) { return; }
  var pending = null;
  function busy() {
    var a = document.activeElement;
    return a && a !== document.body && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName);
  }
  function refresh() {
    pending = null;
    if (busy()) { pending = setTimeout(refresh, 1000); return; }
    fetch(location.href, { credentials: "same-origin", headers: { "X-Console-Live": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var next = new DOMParser().parseFromString(html, "text/html").getElementById("main");
        var main = document.getElementById("main");
        if (next && main) {
          main.innerHTML = next.innerHTML;
          localTimes(main);
          showCopy(main);
          document.body.setAttribute("data-updated", new Date().toISOString());
        }
      })
      .catch(function () {});
  }
  var es = new EventSource(src);
  es.onmessage = function () { if (!pending) { pending = setTimeout(refresh, 300); } };
  ["validity", "lease", "run", "checkpoint", "session", "drain", "reset"].forEach(function (t) {
    es.addEventListener(t, es.onmessage);
  });
})();
