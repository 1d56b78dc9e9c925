// Live updates: every few seconds, fetch each [data-live] element's fragment and swap
// it in, without reloading the page. The pages work without this script.
//
// When a refresh fails (the backend is unreachable: the fragment answers 503 with one
// line saying so; or the dashboard itself does not answer), the figures stay but are
// marked stale: the element gets data-stale="true" and the #stale note says why and
// as of when the figures are. The next refresh that succeeds clears the mark.
(function () {
  "use strict";
  var NOTE_CHARS = 500;

  function mark(el, reason) {
    el.dataset.stale = reason === null ? "false" : "true";
    var note = document.getElementById("stale");
    if (!note) return;
    if (reason === null) {
      note.hidden = true;
      return;
    }
    var asOf = el.querySelector("#as-of");
    note.querySelector(".reason").textContent = reason.slice(0, NOTE_CHARS);
    note.querySelector(".as-of").textContent = asOf ? asOf.textContent : "the last refresh";
    note.hidden = false;
  }

  function failure(answer) {
    var type = answer.headers.get("content-type") || "";
    return answer.text().then(function (body) {
      if (answer.status === 503 && type.indexOf("text/plain") === 0 && body) return body;
      return "the dashboard answered " + answer.status + ".";
    });
  }

  function refresh(el, every) {
    if (document.hidden || el.dataset.busy === "true") return;
    el.dataset.busy = "true";
    var abort = new AbortController();
    var timer = setTimeout(function () { abort.abort(); }, Math.max(2 * every, 5000));
    fetch(el.dataset.live, { credentials: "same-origin", cache: "no-store", signal: abort.signal })
      .then(function (answer) {
        if (!answer.ok) return failure(answer).then(function (reason) { mark(el, reason); });
        return answer.text().then(function (html) {
          el.innerHTML = html; // server-rendered and escaped; inserted scripts never run
          el.dataset.updates = String(Number(el.dataset.updates || 0) + 1);
          mark(el, null);
        });
      })
      .catch(function () { mark(el, "the dashboard did not answer."); })
      .then(function () {
        clearTimeout(timer);
        el.dataset.busy = "false";
      });
  }

  document.querySelectorAll("[data-live]").forEach(function (el) {
    var every = Number(el.dataset.every) || 3000;
    setInterval(function () { refresh(el, every); }, every);
  });
})();
