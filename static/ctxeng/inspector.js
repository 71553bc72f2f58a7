// The item list scrolls inside its panel: bring the selected row into view there, never the page.
document.addEventListener("DOMContentLoaded", function () {
  var list = document.querySelector("#items .list-scroll");
  var row = list && list.querySelector("tr.focus");
  if (row) list.scrollTop = Math.max(0, row.offsetTop - list.clientHeight / 3);
});
