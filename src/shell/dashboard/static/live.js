// Live updates: every few seconds, fetch each [data-live] element's fragment and swap
// it in, without reloading the page. The pages work without this script.
(function () {
  "use strict";
  function refresh(el) {
    if (document.hidden) return;
    fetch(el.dataset.live, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null) {
          el.innerHTML = html; // server-rendered and escaped; inserted scripts never run
          el.dataset.updates = String(Number(el.dataset.updates || 0) + 1);
        }
      })
      .catch(function () {}); // a missed refresh is retried at the next tick
  }
  document.querySelectorAll("[data-live]").forEach(function (el) {
    var every = Number(el.dataset.every) || 3000;
    setInterval(function () { refresh(el); }, every);
  });
})();
