// Copy buttons (the inspector's hashes, a one-time API token or set-password link): a button with
// data-copy puts that text on the clipboard. Where the page has no clipboard access (plain http on
// another host), the text beside the button is selected instead, ready for Ctrl+C. A static file
// (the CSP allows no inline script); without it the text stays selectable.
document.addEventListener("click", function (event) {
  var button = event.target.closest("button[data-copy]");
  if (!button) return;
  function selectBeside() {
    var text = button.previousElementSibling;
    if (!text) return;
    var range = document.createRange();
    range.selectNodeContents(text);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    button.textContent = "selected: press Ctrl+C";
  }
  if (!navigator.clipboard) { selectBeside(); return; }
  navigator.clipboard.writeText(button.getAttribute("data-copy")).then(function () {
    button.textContent = "copied";
    setTimeout(function () { button.textContent = "copy"; }, 1200);
  }, selectBeside);
});
