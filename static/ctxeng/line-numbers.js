// The policy editor's line numbers: the server renders a gutter beside the YAML textarea (with the
// lines that have errors marked); this keeps it in step with the text as it is typed and scrolled.
// A static file (the CSP allows no inline script); without it the numbers stay those of the page.
document.addEventListener("DOMContentLoaded", function () {
  var editor = document.querySelector(".code-editor");
  if (!editor) return;
  var gutter = editor.querySelector(".gutter");
  var text = editor.querySelector("textarea");
  var shown = -1;
  function renumber() {
    var count = Math.max(1, text.value.replace(/\n$/, "").split("\n").length);
    if (count !== shown) {
      var marked = {};
      gutter.querySelectorAll("span.error-line").forEach(function (s) { marked[s.textContent] = true; });
      var lines = [];
      for (var n = 1; n <= count; n++) lines.push(marked[n] ? '<span class="error-line">' + n + "</span>" : "<span>" + n + "</span>");
      gutter.innerHTML = lines.join("\n") + "\n";
      shown = count;
    }
    gutter.scrollTop = text.scrollTop;
  }
  text.addEventListener("input", renumber);
  text.addEventListener("scroll", function () { gutter.scrollTop = text.scrollTop; });
  renumber();
});
