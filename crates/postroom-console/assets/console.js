// postroom console: the little the pages need beyond HTML. Live progress of a redrive run
// (polled as JSON), and "select all" on the parking lot.
"use strict";

function pollRun(el) {
  const url = el.dataset.progressUrl;
  let wasFinal = el.dataset.final === "true";
  const set = (id, v) => { const n = document.getElementById(id); if (n) n.textContent = v; };
  async function tick() {
    try {
      const r = await fetch(url, { credentials: "same-origin", headers: { accept: "application/json" } });
      if (r.ok) {
        const p = await r.json();
        set("run-done", p.done);
        set("run-total", p.total);
        set("run-state", p.state);
        const bar = document.getElementById("run-progress");
        if (bar) { bar.max = p.total; bar.value = p.done; }
        const joined = document.getElementById("run-joined");
        if (joined) { set("run-joined-n", p.joined); joined.hidden = !(p.joined > 0); }
        if (p.final) {
          // Reload once so that the buttons and the audit show the end of the run.
          if (!wasFinal) { wasFinal = true; window.location.reload(); }
          return;
        }
      }
    } catch (e) { /* the next tick tries again */ }
    setTimeout(tick, 400);
  }
  if (!wasFinal) tick();
}

document.addEventListener("DOMContentLoaded", () => {
  const run = document.getElementById("run");
  if (run) pollRun(run);
  const all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", () => {
      document.querySelectorAll("input.sel").forEach((c) => { c.checked = all.checked; });
    });
  }
});
