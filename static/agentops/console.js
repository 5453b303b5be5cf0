// The console's only script (the CSP allows no inline code): times in the operator's time zone,
// ticking ages and countdowns, the live connection's status and catch-up, the keyboard
// shortcuts and where focus lands. Every action is a real form: this only makes it faster.
(function () {
  "use strict";

  // --- times -----------------------------------------------------------------------------

  function duration(seconds) {
    var s = Math.max(0, Math.round(seconds));
    var h = Math.floor(s / 3600);
    var m = Math.floor((s % 3600) / 60);
    var rest = s % 60;
    var mm = h > 0 && m < 10 ? "0" + m : String(m);
    var ss = rest < 10 ? "0" + rest : String(rest);
    return h > 0 ? h + ":" + mm + ":" + ss : mm + ":" + ss;
  }

  function relative(seconds) {
    var s = Math.round(Math.abs(seconds));
    var text;
    if (s < 60) text = s + "s";
    else if (s < 3600) text = Math.floor(s / 60) + "m";
    else if (s < 86400) text = Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    else text = Math.floor(s / 86400) + "d";
    return seconds >= 0 ? text + " ago" : "in " + text;
  }

  function zoneSetting() {
    var meta = document.querySelector('meta[name="time-zone"]');
    return meta ? meta.getAttribute("content") : "";
  }

  var timeZone = zoneSetting() || Intl.DateTimeFormat().resolvedOptions().timeZone;
  var absoluteFormat;
  try {
    absoluteFormat = new Intl.DateTimeFormat("en-CA", {
      timeZone: timeZone, year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
      timeZoneName: "short"
    });
  } catch (e) {  // an unknown zone name: UTC, and say so
    timeZone = "UTC";
    absoluteFormat = new Intl.DateTimeFormat("en-CA", {
      timeZone: "UTC", year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
      timeZoneName: "short"
    });
  }

  // "2025-01-02 16:01:05 CET": one absolute format everywhere.
  function absolute(ms) {
    var parts = {};
    absoluteFormat.formatToParts(new Date(ms)).forEach(function (p) { parts[p.type] = p.value; });
    return parts.year + "-" + parts.month + "-" + parts.day + " " + parts.hour + ":" +
      parts.minute + ":" + parts.second + " " + parts.timeZoneName;
  }

  // The server's clock decides when a retry is due: correct for this browser's clock.
  var skew = 0;
  var serverTime = document.querySelector('meta[name="server-time"]');
  if (serverTime) {
    var parsed = Date.parse(serverTime.getAttribute("content"));
    if (!isNaN(parsed)) skew = parsed - Date.now();
  }

  function setWhen(el, now) {
    var at = Date.parse(el.getAttribute("datetime"));
    if (isNaN(at)) return;
    var rel = el.querySelector(".rel");
    if (!rel) {
      el.textContent = "";
      rel = document.createElement("span");
      rel.className = "rel";
      var abs = document.createElement("span");
      abs.className = "abs";
      abs.textContent = absolute(at);
      el.appendChild(rel);
      el.appendChild(document.createTextNode(" · "));
      el.appendChild(abs);
    }
    rel.textContent = relative((now - at) / 1000);
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
    document.querySelectorAll(".countdown-at[data-at]").forEach(function (el) {
      var at = Date.parse(el.getAttribute("data-at"));
      if (!isNaN(at) && !el.textContent) el.textContent = " (at " + absolute(at) + ")";
    });
    document.querySelectorAll("time[data-when]").forEach(function (el) { setWhen(el, now); });
    document.querySelectorAll("[data-browser-time-zone]").forEach(function (el) {
      el.textContent = Intl.DateTimeFormat().resolvedOptions().timeZone;
    });
  }

  // --- live connection --------------------------------------------------------------------

  function setStatus(text, state) {
    var el = document.getElementById("live-status");
    if (!el) return;
    el.textContent = text;
    el.dataset.state = state;
  }

  // A request htmx has in flight: it marks the element that sent it (the form, or a button
  // with its own hx-post) with this class until the answer is swapped. (Or the element an
  // hx-indicator names instead; the console sets none. hx-disabled-elt only disables.)
  function requestIn(root) {
    var marked = "." + htmx.config.requestClass;
    return root.matches(marked) || root.querySelector(marked) !== null;
  }

  // Pushes that arrive while an action's request is in flight. htmx looks the answer's
  // out-of-band regions up under the root node of the element that sent the request: had a
  // push replaced the region holding that element, that root would be the detached region, and
  // htmx would find none of them (oobErrorNoTarget). So such a push leaves that region alone.
  // And the answer, rendered before the push, may land after it and put older regions back.
  // The rule for the page's cursor (#live-cursor: every region reflects every event up to it):
  // it moves only with a push that arrives while no request is in flight. When the last
  // request ends, a page that received pushes meanwhile catches up from its unmoved cursor (the
  // message a reconnect sends): the server sends again every region the events since touched,
  // rendered after the answer, with a cursor the page keeps. (The unmoved cursor is older than
  // the answer, which the server rendered after the request began.)
  var liveSocket = null;
  var catchUpOwed = false;

  // The cursor the page has reached, for the server: "send what changed after it".
  function sendCursor(socketWrapper) {
    var cursor = document.getElementById("live-cursor");
    var after = cursor ? parseInt(cursor.dataset.event || "0", 10) : 0;
    socketWrapper.send(JSON.stringify({ after: isNaN(after) ? 0 : after }));
  }

  // A live push carries every region its changes touch. Dropped here, before htmx swaps: a
  // region this page no longer holds (htmx would report a swap without a target), and, while a
  // request is in flight, the region holding it and the push's cursor.
  htmx.defineExtension("live-regions", {
    transformResponse: function (text, xhr) {
      if (xhr) return text; // an action's answer, not a push
      var acting = requestIn(document.body);
      var holder = document.createElement("template");
      holder.innerHTML = text;
      Array.prototype.slice.call(holder.content.children).forEach(function (region) {
        if (!region.id) return;
        var current = document.getElementById(region.id);
        if (!current || (acting && (region.id === "live-cursor" || requestIn(current)))) {
          region.remove();
        }
      });
      if (acting) catchUpOwed = true;
      return holder.innerHTML;
    },
  });

  // htmx:afterRequest, not afterSettle: it follows every request, swapped or not (an error, an
  // abort, a 204), and comes after the answer's swap (the console sets no swap delay). It is
  // heard here even when the answer replaced the element that sent it (htmx then triggers it on
  // the closest ancestor still in the page).
  document.addEventListener("htmx:afterRequest", function () {
    if (!catchUpOwed || !liveSocket || requestIn(document.body)) return;
    catchUpOwed = false;
    sendCursor(liveSocket);
  });

  // On every (re)connect, tell the server the last event this page has seen: it sends back
  // the fragments that changed since, so nothing is missed while the socket was down.
  document.addEventListener("htmx:wsOpen", function (event) {
    liveSocket = event.detail.socketWrapper;
    sendCursor(liveSocket);
    setStatus("live", "open");
  });
  document.addEventListener("htmx:wsClose", function (event) {
    // 4403: the login ended (a logout, an expired session, a withdrawn permission). The socket
    // is not opened again; a reload leads to the login page.
    var closed = event.detail && event.detail.event;
    if (closed && closed.code === 4403) {
      setStatus("signed out: reload the page", "closed");
      return;
    }
    setStatus("reconnecting…", "closed");
  });
  document.addEventListener("htmx:wsError", function () {
    setStatus("offline", "closed");
  });

  // An action's notice (an event of its answer) moves from the fragment to the page's notice
  // area, which no live update replaces.
  document.addEventListener("agentops:notice", function (event) {
    var area = document.getElementById("notice");
    if (!area) return;
    document.querySelectorAll("main .notice").forEach(function (el) {
      if (!area.contains(el)) el.remove();
    });
    area.textContent = "";
    if (event.detail && event.detail.value) {
      var p = document.createElement("p");
      p.className = "notice";
      p.textContent = event.detail.value;
      area.appendChild(p);
    }
  });

  // --- focus ------------------------------------------------------------------------------

  // The element (by id) that last had focus: a live re-render replaces it with an equal one,
  // and focus goes back to that one instead of falling to the page body.
  var lastFocused = "";
  document.addEventListener("focusin", function (event) {
    if (event.target && event.target.id) lastFocused = event.target.id;
  });

  function focusLost() {
    var active = document.activeElement;
    return !active || active === document.body || !document.body.contains(active);
  }

  // The page's most specific landing place: the last one marked (a decision's outcome or an
  // error comes after the heading).
  function lastMarked() {
    var marked = document.querySelectorAll("[data-focus]");
    return marked[marked.length - 1];
  }

  // Where focus goes when it was lost: the element that had it, else the landing place.
  function restoreFocus() {
    if (!focusLost()) return;
    var target = (lastFocused && document.getElementById(lastFocused)) || lastMarked();
    if (target) target.focus();
  }

  // After a person's action (a request htmx sent), focus what it produced: the decision or
  // the error, wherever focus was (a shortcut leaves it on the heading). The live push of the
  // same change may have landed first and replaced what the answer was swapped into: then
  // what it produced is the page's landing place.
  var acted = false;
  document.addEventListener("htmx:beforeRequest", function () { acted = true; });
  document.addEventListener("htmx:afterSettle", function (event) {
    tick();
    if (!acted) {
      restoreFocus();
      return;
    }
    acted = false;
    var produced = event.detail.elt && event.detail.elt.querySelector &&
      event.detail.elt.querySelector("[data-focus]");
    var target = produced && document.body.contains(produced) ? produced : lastMarked();
    if (target) target.focus();
  });
  document.addEventListener("htmx:wsAfterMessage", function () {
    tick();
    // The live push can show what the person's action produced before the action's own answer
    // lands; that answer is then swapped into what the push replaced, out of the page, and
    // settles unseen. So the push's outcome takes the focus the answer would have given.
    var outcome = acted && document.querySelector('[data-focus="outcome"]');
    if (outcome) {
      acted = false;
      outcome.focus();
      return;
    }
    restoreFocus();
  });

  // --- keyboard ---------------------------------------------------------------------------

  function typing(el) {
    return el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  }

  function visible(el) {
    return el && !el.disabled && el.getClientRects().length > 0;
  }

  function shortcutFor(key) {
    var found = document.querySelectorAll('[data-key="' + key + '"]');
    for (var i = 0; i < found.length; i++) if (visible(found[i])) return found[i];
    return null;
  }

  function activate(el) {
    if (typing(el) || el.type === "checkbox") el.focus();
    else el.click();
  }

  function moveItem(step) {
    var items = Array.prototype.filter.call(document.querySelectorAll("[data-item]"), visible);
    if (!items.length) return;
    var at = items.indexOf(document.activeElement);
    var next = at < 0 ? 0 : Math.min(items.length - 1, Math.max(0, at + step));
    items[next].focus();
    items[next].scrollIntoView({ block: "nearest" });
  }

  function listPageShortcuts() {
    var list = document.getElementById("shortcuts-page");
    if (!list) return;
    var rows = [];
    document.querySelectorAll("[data-key]").forEach(function (el) {
      if (!visible(el)) return;
      var label = el.getAttribute("data-key-label") || el.textContent.trim();
      rows.push([el.getAttribute("data-key"), label]);
    });
    if (!rows.length) return;
    list.textContent = "";
    rows.forEach(function (row) {
      var div = document.createElement("div");
      var dt = document.createElement("dt");
      var kbd = document.createElement("kbd");
      kbd.textContent = row[0];
      dt.appendChild(kbd);
      var dd = document.createElement("dd");
      dd.textContent = row[1].replace(/\s+/g, " ");
      div.appendChild(dt);
      div.appendChild(dd);
      list.appendChild(div);
    });
  }

  function toggleShortcuts() {
    var dialog = document.getElementById("shortcuts");
    if (!dialog) return;
    if (dialog.open) {
      dialog.close();
    } else {
      listPageShortcuts();
      dialog.showModal();
    }
  }

  var pendingG = false;
  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.altKey || event.metaKey) return;
    var target = event.target;
    // Ctrl+Enter in a reason or an answer sends it with the button it names.
    if (event.ctrlKey && event.key === "Enter" && target.dataset && target.dataset.ctrlEnter) {
      var button = document.getElementById(target.dataset.ctrlEnter);
      if (button) { event.preventDefault(); button.click(); }
      return;
    }
    // Enter on a high-risk confirmation approves (once it is ticked).
    if (event.key === "Enter" && target.type === "checkbox" && target.name === "confirm") {
      event.preventDefault();
      var approve = target.form && target.form.querySelector('button[value="approve"]');
      if (approve) approve.click();
      return;
    }
    if (event.ctrlKey || typing(target)) return;
    if (document.getElementById("shortcuts") && document.getElementById("shortcuts").open &&
        event.key !== "?") return;
    if (pendingG) {
      pendingG = false;
      var go = { i: "/", r: "/runs/" }[event.key];
      if (go) { event.preventDefault(); window.location.assign(go); }
      return;
    }
    var key = event.key;
    if (key === "?") { event.preventDefault(); toggleShortcuts(); return; }
    if (key === "g") { pendingG = true; return; }
    if (key === "j") { event.preventDefault(); moveItem(1); return; }
    if (key === "k") { event.preventDefault(); moveItem(-1); return; }
    if (key === "/") {
      var search = document.querySelector('input[type="search"]');
      event.preventDefault();
      if (search) search.focus(); else window.location.assign("/runs/#q");
      return;
    }
    var shortcut = shortcutFor(key);
    if (shortcut) { event.preventDefault(); activate(shortcut); }
  });

  document.addEventListener("DOMContentLoaded", function () {
    tick();
    document.querySelectorAll("[data-shortcuts]").forEach(function (button) {
      button.hidden = false;
      button.addEventListener("click", toggleShortcuts);
    });
    // Focus lands on the page's first thing to do (the inbox's oldest item, a decision's title).
    var first = document.querySelector("[data-focus]");
    if (first && focusLost()) first.focus();
  });
  setInterval(tick, 1000);
})();
