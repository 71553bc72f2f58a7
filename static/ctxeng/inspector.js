// The manifest inspector. The item list scrolls inside its panel: bring the selected row into view
// there, never the page. Selecting an item swaps the inspector in place (htmx, the URL pushed) and
// moves the keyboard focus to the item's heading, so a screen reader reads the item and Tab goes
// on into its story. j / k select the next / previous item of the list (not while typing).
(function () {
  function scrollListToSelection() {
    var list = document.querySelector("#items .list-scroll");
    var row = list && list.querySelector("tr.focus");
    if (row) list.scrollTop = Math.max(0, row.offsetTop - list.clientHeight / 3);
  }
  document.addEventListener("DOMContentLoaded", scrollListToSelection);
  document.addEventListener("htmx:afterSettle", function (event) {
    if (!event.target || event.target.id !== "inspector-area") return;
    scrollListToSelection();
    var title = document.getElementById("inspector-title");
    if (title) title.focus({preventScroll: false});
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "j" && event.key !== "k") return;
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var target = event.target;
    if (target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) return;
    var links = Array.prototype.slice.call(document.querySelectorAll("#items a.select-item"));
    if (!links.length) return;
    var current = links.findIndex(function (a) { return a.closest("tr").classList.contains("focus"); });
    var next = event.key === "j" ? current + 1 : (current < 0 ? links.length - 1 : current - 1);
    if (next < 0 || next >= links.length) return;
    event.preventDefault();
    links[next].click();
  });
})();
