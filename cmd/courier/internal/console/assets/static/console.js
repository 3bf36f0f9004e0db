// courier console: follows a running replay job's progress. Every page
// works without this script; it only spares a reload.
"use strict";
(function () {
  const job = document.getElementById("job");
  if (!job || job.dataset.done === "true") return;
  const url = job.dataset.progress;
  const set = (id, v) => { const el = document.getElementById(id); if (el) el.textContent = String(v); };
  async function poll() {
    let p;
    try {
      const res = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      p = await res.json();
    } catch (e) {
      setTimeout(poll, 2000);
      return;
    }
    if (p.error && !p.id) { set("state", p.error); return; }
    document.getElementById("bar").value = p.percent;
    set("percent", Math.round(p.percent));
    set("read", p.read); set("total", p.total); set("moved", p.moved); set("refused", p.refused);
    set("skipped", p.skipped); set("corrupt", p.corrupt); set("not-selected", p.not_selected);
    set("already", p.already_replayed); set("rate", Math.round(p.per_second)); set("elapsed", p.elapsed);
    if (p.done) { window.location.reload(); return; }
    setTimeout(poll, 500);
  }
  setTimeout(poll, 300);
})();
