// Timestamps in the browser's zone, when the user chose that (the "times:" switch in the top bar,
// stored on their profile; base.html puts it on <html data-time-display>). The server writes each
// as <time datetime="…Z">YYYY-MM-DD HH:MM:SS UTC</time>; this rewrites the text into the same
// format in the local zone, with the zone's name, and keeps the UTC text as the title. A static
// file: the CSP allows no inline script. Regions htmx swaps in later are rewritten too.
(function () {
  function two(n) { return (n < 10 ? "0" : "") + n; }
  function zoneName(date) {
    try {
      var parts = new Intl.DateTimeFormat("en-GB", { timeZoneName: "short" }).formatToParts(date);
      var zone = parts.filter(function (p) { return p.type === "timeZoneName"; })[0];
      if (zone) { return zone.value; }
    } catch (e) { /* an old browser: fall back to the offset below */ }
    var offset = -date.getTimezoneOffset();
    return "UTC" + (offset < 0 ? "-" : "+") + two(Math.floor(Math.abs(offset) / 60)) + ":" + two(Math.abs(offset) % 60);
  }
  function localise(root) {
    if (document.documentElement.getAttribute("data-time-display") !== "local") { return; }
    var times = (root || document).querySelectorAll("time[datetime]:not([data-local])");
    for (var i = 0; i < times.length; i++) {
      var date = new Date(times[i].getAttribute("datetime"));
      if (isNaN(date.getTime())) { continue; }
      times[i].textContent = date.getFullYear() + "-" + two(date.getMonth() + 1) + "-" + two(date.getDate()) + " " +
        two(date.getHours()) + ":" + two(date.getMinutes()) + ":" + two(date.getSeconds()) + " " + zoneName(date);
      times[i].setAttribute("data-local", "");
    }
  }
  document.addEventListener("DOMContentLoaded", function () { localise(document); });
  document.addEventListener("htmx:afterSettle", function (event) { localise(event.target); });
})();
