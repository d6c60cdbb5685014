// conveyor dashboard: live updates and bulk selection. Everything works without
// this script (pages render on the server; forms post normally); it only keeps
// the `[data-live]` region of the page fresh, in place: pushed by the server
// (server-sent events, `data-live-stream` on <body>) when the page has a
// stream, else polled every few seconds. When the stream drops the poll takes
// over and the stream is retried with a growing delay.
"use strict";
(function () {
  var INTERVAL_MS = 3000;
  var RETRY_FIRST_MS = 2000, RETRY_MAX_MS = 60000;
  var region = document.querySelector("[data-live]");
  var toggle = document.querySelector("[data-live-toggle]");
  var streamUrl = document.body.getAttribute("data-live-stream");
  var paused = sessionStorage.getItem("conveyor-live-paused") === "1";
  var busy = false;
  var source = null, retryTimer = null, retryMs = RETRY_FIRST_MS, pollTimer = null;
  var pending = null;  // a pushed fragment kept while the user is busy in the region

  function showState() {
    if (!toggle) return;
    toggle.setAttribute("aria-pressed", paused ? "true" : "false");
    toggle.textContent = paused ? "Live: paused" : "Live";
  }

  // A region that holds the user's focus or selection waits: replacing it
  // would take the focus away or untick boxes mid-choice.
  function userIsBusyIn(node) {
    var active = document.activeElement;
    if (active && active !== document.body && node.contains(active) &&
        /^(INPUT|SELECT|TEXTAREA|BUTTON|SUMMARY|A)$/.test(active.tagName)) return true;
    if (node.querySelector("details[open]")) return true;
    return false;
  }

  function refresh() {
    if (!region || paused || busy || document.hidden || userIsBusyIn(region)) return;
    busy = true;
    var checked = selectedIds();
    fetch(location.href, {headers: {"X-Conveyor-Live": "1"}, credentials: "same-origin", cache: "no-store"})
      .then(function (response) {
        if (response.status === 401) { location.reload(); return null; }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html === null || userIsBusyIn(region)) return;
        replace(html, checked);
      })
      .catch(function () { /* offline for a moment: the next tick tries again */ })
      .then(function () { busy = false; });
  }

  function selectedIds() {
    return Array.prototype.map.call(
      region.querySelectorAll('input[type="checkbox"][name="id"]:checked'),
      function (box) { return box.value; });
  }

  function replace(html, checked) {
    region.innerHTML = html;
    checked.forEach(function (id) {
      var box = region.querySelector('input[type="checkbox"][name="id"][value="' + CSS.escape(id) + '"]');
      if (box) box.checked = true;
    });
    bindSelectAll();
    document.dispatchEvent(new CustomEvent("conveyor:refreshed"));
  }

  function applyPending() {
    if (pending === null || paused || userIsBusyIn(region)) return;
    var html = pending;
    pending = null;
    replace(html, selectedIds());
  }

  function startPolling() {
    if (pollTimer === null) pollTimer = setInterval(refresh, INTERVAL_MS);
  }

  function stopPolling() {
    if (pollTimer !== null) { clearInterval(pollTimer); pollTimer = null; }
  }

  function closeStream() {
    if (source) { source.close(); source = null; }
    if (retryTimer !== null) { clearTimeout(retryTimer); retryTimer = null; }
  }

  // Hidden or paused tabs hold no stream: a browser allows few connections per
  // server, and a stream holds one.
  function openStream() {
    if (!region || !streamUrl || !window.EventSource || paused || document.hidden || source) return;
    source = new EventSource(streamUrl, {withCredentials: true});
    source.addEventListener("snapshot", function (message) {
      retryMs = RETRY_FIRST_MS;
      stopPolling();
      pending = JSON.parse(message.data).html;
      applyPending();
    });
    source.addEventListener("signed-out", function () { closeStream(); location.reload(); });
    source.onerror = function () {
      // Dropped or refused (signed out, too many streams): poll meanwhile (a
      // signed-out poll reloads to the sign-in page), retry later, slower each time.
      closeStream();
      startPolling();
      retryTimer = setTimeout(function () { retryTimer = null; openStream(); }, retryMs);
      retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
    };
  }

  function bindSelectAll() {
    var all = document.querySelector("[data-select-all]");
    if (!all) return;
    all.addEventListener("change", function () {
      var form = all.form || all.closest("form");
      if (!form) return;
      form.querySelectorAll('input[type="checkbox"][name="id"]').forEach(function (box) {
        box.checked = all.checked;
      });
    });
  }

  if (toggle) {
    toggle.addEventListener("click", function () {
      paused = !paused;
      sessionStorage.setItem("conveyor-live-paused", paused ? "1" : "0");
      showState();
      if (paused) { closeStream(); pending = null; } else { refresh(); openStream(); }
    });
  }
  showState();
  bindSelectAll();
  if (region) {
    if (streamUrl && window.EventSource) openStream(); else startPolling();
    // A fragment held back while the user was busy goes in once they leave.
    document.addEventListener("focusout", function () { setTimeout(applyPending, 0); });
    document.addEventListener("toggle", function () { setTimeout(applyPending, 0); }, true);
  }
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { closeStream(); return; }
    refresh();
    openStream();
  });
})();
