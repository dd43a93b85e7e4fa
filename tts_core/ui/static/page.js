// The text count and the run status line. Runs as the #text-count gr.HTML's js_on_load
// (`element` is that block).
// The count: the text's characters as the server counts them (whitespace runs as one, none at
// either end) against the deployment's one limit (data-max), said before the limit is passed
// and never cut: the server refuses a longer text with the same numbers.
// window.__ttsRunStatus.set(state, text): the line under Generate / Stop (#run-status), so
// that what a click is doing (Generating…, Done, Error: …) shows next to the button, also on a
// phone where the players sit far below. The stats panel calls it (stats_panel.js).
(() => {
  const counted = (text) => [...text.replace(/\s+/g, " ").trim()].length;
  let shown = null;

  function renderCount() {
    const line = element.querySelector(".text-count");
    const box = document.querySelector("#text textarea");
    if (!line || !box) return;
    const max = Number(line.dataset.max);
    const n = counted(box.value);
    const key = `${n}/${max}`;
    if (key === shown) return;
    shown = key;
    const over = n > max;
    line.classList.toggle("over", over);
    line.textContent = over
      ? `${n} characters: ${n - max} over the limit of ${max}. Shorten the text before Generate.`
      : `${n} / ${max} characters`;
  }

  function setRunStatus(state, text) {
    const line = document.querySelector("#run-status .run-status");
    if (!line) return;
    line.dataset.state = state;
    line.textContent = text;
    // a run's start and its error are brought into view (the least scroll that shows them)
    if (state === "running" || state === "error") {
      const box = line.getBoundingClientRect();
      if (box.top < 0 || box.bottom > window.innerHeight) line.scrollIntoView({ block: "nearest" });
    }
  }

  document.addEventListener("input", (event) => {
    if (event.target && event.target.closest && event.target.closest("#text")) renderCount();
  });
  // a value set by the page itself (an example) fires no input event
  setInterval(renderCount, 500);
  renderCount();
  window.__ttsRunStatus = { set: setRunStatus, count: renderCount };
})();
