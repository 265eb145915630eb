// flowmem's web UI: light progressive enhancement. Every page works without it.
//
// - The memory page's results follow the search form as you type: the results part is
//   fetched again from the server (`fragment=1`), which renders and escapes it.
// - A form with `data-confirm` asks first.
"use strict";

const search = document.getElementById("search");
const results = document.getElementById("results");
if (search && results) {
  let timer = null;
  let latest = 0;
  const refresh = () => {
    const params = new URLSearchParams(new FormData(search));
    const shown = "/?" + params.toString();
    params.set("fragment", "1");
    const mine = ++latest;
    fetch("/?" + params.toString(), { credentials: "same-origin" })
      .then((reply) => (reply.ok ? reply.text() : null))
      .then((html) => {
        if (html !== null && mine === latest) {
          results.innerHTML = html;
          history.replaceState(null, "", shown);
        }
      })
      .catch(() => {});
  };
  search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, 200);
  });
}

for (const form of document.querySelectorAll("form[data-confirm]")) {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) {
      event.preventDefault();
    }
  });
}
