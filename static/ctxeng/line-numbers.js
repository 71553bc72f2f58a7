// The policy editor's line numbers: the server renders a gutter beside the YAML textarea (with the
// lines that have errors marked); this keeps it in step with the text as it is typed and scrolled.
// A static file (the CSP allows no inline script); without it the numbers stay those of the page.
document.addEventListener("DOMContentLoaded", function () {
  var editor = document.querySelector(".code-editor");
  if (!editor) return;
  var gutter = editor.querySelector(".gutter");
  var text = editor.querySelector("textarea");
  var shown = -1;
  var padding = parseFloat(getComputedStyle(gutter).paddingBottom) || 0;
  function fit() {
    // The gutter is as tall as the text box (which keeps its rows and scrolls; the gutter, taller,
    // would otherwise stretch it) and scrolls as far as the text does, or its numbers stop short of
    // the text's at the end of a long policy: the text box has a horizontal scrollbar (wrap="off")
    // and an empty last line after a final line break, which the gutter has not. It gets that much
    // more room below.
    gutter.style.height = text.offsetHeight + "px";
    gutter.style.paddingBottom = padding + "px";
    var short = (text.scrollHeight - text.clientHeight) - (gutter.scrollHeight - gutter.clientHeight);
    if (short > 0) gutter.style.paddingBottom = padding + short + "px";
    align();
  }
  function align() { gutter.scrollTop = text.scrollTop; }
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
    fit();
  }
  text.addEventListener("input", renumber);
  text.addEventListener("scroll", align);
  if (window.ResizeObserver) new ResizeObserver(fit).observe(text);  // the box resized by its handle
  renumber();
});
