// Says so when an htmx request fails: htmx swaps nothing for a non-2xx answer (base.html lets
// only a 422 with its validation errors through) or when the server cannot be reached, and a
// button that silently does nothing reads as "it worked". A static file: the CSP allows no inline script.
(function () {
  function show(text) {
    var box = document.getElementById("request-error");
    if (!box) { return; }
    box.textContent = text;
    box.hidden = false;
  }
  document.addEventListener("htmx:beforeRequest", function () {
    var box = document.getElementById("request-error");
    if (box) { box.hidden = true; }
  });
  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    var reason = { 403: "you lack the role this needs", 404: "it is not there any more", 409: "it changed meanwhile" }[xhr.status];
    show("The server answered " + xhr.status + (reason ? " (" + reason + ")" : "") + "; nothing changed. Reload the page to see where things stand.");
  });
  document.addEventListener("htmx:sendError", function () {
    show("The server could not be reached; nothing changed.");
  });
})();
