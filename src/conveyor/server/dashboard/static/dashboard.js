// conveyor dashboard: live updates and bulk selection. Everything works without
// this script (pages render on the server; forms post normally); it only keeps
// the `[data-live]` region of the page fresh, every few seconds, in place.
"use strict";
(function () {
  var INTERVAL_MS = 3000;
  var region = document.querySelector("[data-live]");
  var toggle = document.querySelector("[data-live-toggle]");
  var paused = sessionStorage.getItem("conveyor-live-paused") === "1";
  var busy = false;

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
    var checked = Array.prototype.map.call(
      region.querySelectorAll('input[type="checkbox"][name="id"]:checked'),
      function (box) { return box.value; });
    fetch(location.href, {headers: {"X-Conveyor-Live": "1"}, credentials: "same-origin", cache: "no-store"})
      .then(function (response) {
        if (response.status === 401) { location.reload(); return null; }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html === null || userIsBusyIn(region)) return;
        region.innerHTML = html;
        checked.forEach(function (id) {
          var box = region.querySelector('input[type="checkbox"][name="id"][value="' + CSS.escape(id) + '"]');
          if (box) box.checked = true;
        });
        bindSelectAll();
        document.dispatchEvent(new CustomEvent("conveyor:refreshed"));
      })
      .catch(function () { /* offline for a moment: the next tick tries again */ })
      .then(function () { busy = false; });
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
      if (!paused) refresh();
    });
  }
  showState();
  bindSelectAll();
  if (region) setInterval(refresh, INTERVAL_MS);
  document.addEventListener("visibilitychange", function () { if (!document.hidden) refresh(); });
})();
