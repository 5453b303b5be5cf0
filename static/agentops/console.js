// The console's only script (the CSP allows no inline code): ticking ages and countdowns,
// the live connection's status, and the catch-up message sent when the websocket (re)opens.
(function () {
  "use strict";

  function duration(seconds) {
    var s = Math.max(0, Math.round(seconds));
    var h = Math.floor(s / 3600);
    var m = Math.floor((s % 3600) / 60);
    var rest = s % 60;
    var mm = h > 0 && m < 10 ? "0" + m : String(m);
    var ss = rest < 10 ? "0" + rest : String(rest);
    return h > 0 ? h + ":" + mm + ":" + ss : mm + ":" + ss;
  }

  function age(seconds) {
    var s = Math.max(0, Math.round(seconds));
    if (s < 60) return s + "s ago";
    if (s < 3600) return Math.floor(s / 60) + "m ago";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m ago";
    return Math.floor(s / 86400) + "d ago";
  }

  // The server's clock decides when a retry is due: correct for this browser's clock.
  var skew = 0;
  var serverTime = document.querySelector('meta[name="server-time"]');
  if (serverTime) {
    var parsed = Date.parse(serverTime.getAttribute("content"));
    if (!isNaN(parsed)) skew = parsed - Date.now();
  }

  function tick() {
    var now = Date.now() + skew;
    document.querySelectorAll("time[data-countdown]").forEach(function (el) {
      var due = Date.parse(el.getAttribute("datetime"));
      if (isNaN(due)) return;
      var left = (due - now) / 1000;
      el.textContent = left > 0 ? "in " + duration(left) : "due now";
      el.classList.toggle("due", left <= 0);
    });
    document.querySelectorAll("time[data-age]").forEach(function (el) {
      var at = Date.parse(el.getAttribute("datetime"));
      if (!isNaN(at)) el.textContent = age((now - at) / 1000);
    });
  }

  function setStatus(text, state) {
    var el = document.getElementById("live-status");
    if (!el) return;
    el.textContent = text;
    el.dataset.state = state;
  }

  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("htmx:afterSettle", tick);
  document.addEventListener("htmx:wsAfterMessage", tick);
  setInterval(tick, 1000);

  // On every (re)connect, tell the server the last event this page has seen: it sends back
  // the fragments that changed since, so nothing is missed while the socket was down.
  document.addEventListener("htmx:wsOpen", function (event) {
    var cursor = document.getElementById("live-cursor");
    var after = cursor ? parseInt(cursor.dataset.event || "0", 10) : 0;
    event.detail.socketWrapper.send(JSON.stringify({ after: isNaN(after) ? 0 : after }));
    setStatus("live", "open");
  });
  document.addEventListener("htmx:wsClose", function () {
    setStatus("reconnecting…", "closed");
  });
  document.addEventListener("htmx:wsError", function () {
    setStatus("offline", "closed");
  });
})();
