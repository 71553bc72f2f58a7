// Boxes that scroll (a wide table at 390 px, a long excerpt, the impact rows' tables) must be
// reachable from the keyboard, or a keyboard user cannot scroll them (WCAG 2.1.1; axe-core's
// scrollable-region-focusable). Whether a box scrolls depends on the width of the screen, so this
// looks after every layout: a box that overflows, scrolls (overflow auto or scroll) and holds
// nothing focusable gets tabindex="0"; one that stops overflowing loses the tabindex it got here.
// Templates give the boxes they know scroll a tabindex, a role and a label of their own.
(function () {
  var FOCUSABLE = "a[href], button, input, select, textarea, summary, [tabindex]";
  function scrolls(value) { return value === "auto" || value === "scroll"; }
  function mark(root) {
    (root || document.body).querySelectorAll("*").forEach(function (box) {
      var wide = box.scrollWidth > box.clientWidth + 1, tall = box.scrollHeight > box.clientHeight + 1;
      var ours = box.hasAttribute("data-scroll-focus");
      if (!wide && !tall) {
        if (ours) { box.removeAttribute("tabindex"); box.removeAttribute("data-scroll-focus"); }
        return;
      }
      if (ours || box.hasAttribute("tabindex")) return;
      var style = getComputedStyle(box);
      if (!((wide && scrolls(style.overflowX)) || (tall && scrolls(style.overflowY)))) return;
      if (box.querySelector(FOCUSABLE)) return;
      box.setAttribute("tabindex", "0");
      box.setAttribute("data-scroll-focus", "");
    });
  }
  var pending = null;
  function later() { if (pending === null) pending = requestAnimationFrame(function () { pending = null; mark(); }); }
  document.addEventListener("DOMContentLoaded", function () { mark(); });
  document.addEventListener("htmx:afterSettle", later);
  window.addEventListener("resize", later);
})();
