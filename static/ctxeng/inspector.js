// Copy buttons of the manifest inspector: a button with data-copy puts that text on the clipboard.
// A static file (the CSP allows no inline script); without it the hashes stay selectable text.
document.addEventListener("click", function (event) {
  var button = event.target.closest("button[data-copy]");
  if (!button || !navigator.clipboard) return;
  navigator.clipboard.writeText(button.getAttribute("data-copy")).then(function () {
    button.textContent = "copied";
    setTimeout(function () { button.textContent = "copy"; }, 1200);
  });
});

// The item list scrolls inside its panel: bring the selected row into view there, never the page.
document.addEventListener("DOMContentLoaded", function () {
  var list = document.querySelector("#items .list-scroll");
  var row = list && list.querySelector("tr.focus");
  if (row) list.scrollTop = Math.max(0, row.offsetTop - list.clientHeight / 3);
});
