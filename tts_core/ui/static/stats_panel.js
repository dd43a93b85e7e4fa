// The live stats panel, shared by both players. Runs as gr.HTML's js_on_load (`element` is the
// panel). The low-latency player feeds it from the PCM route's STATS frames; the standard
// player from its handler's stats output (a hidden gr.JSON whose change event calls update).
// window.__ttsStats = {begin(label, clickT), update(stats), heard(ms), underruns(n, silentMs),
//                      failed(message), stopped(), playbackCurve(timeline),
//                      textStream(progress), last}
// progress (the low-latency player's text-streamed run): {total, sent, firstAudioWord, audioS}
// -> the "text in / audio out" line.
// stats: the engine's (RequestStats.as_dict): time_to_first_audio_s, real_time_factor, chunks,
// chunk_compute_s[], chunk_audio_s[], chunk_batch_size[], queue_wait_s, timeline [[wall s,
// audio s so far], ...], done, stop_reason, backend, model, device, weight_format, notices[];
// or {error: message} when the standard player's request failed.
(() => {
  const SVG = 'xmlns="http://www.w3.org/2000/svg"';
  const $ = (name) => element.querySelector(`[data-s="${name}"]`);
  const set = (name, text) => { const node = $(name); if (node) node.textContent = text; };
  const ms = (s) => (s === null || s === undefined ? "–" : `${Math.round(s * 1000)} ms`);
  const last = (list) => (list && list.length ? list[list.length - 1] : null);
  let run = null; // {label, clickT, heardMs, underruns, silentMs, stats, text}

  function begin(label, clickT) {
    run = { label, clickT, heardMs: null, underruns: null, silentMs: 0, stats: null, text: null };
    window.__ttsStats.last = run;
    state("running", "Generating…");
    render();
  }

  function state(name, text) {
    element.dataset.state = name;
    set("state", text);
    // the same words next to Generate (page.js): on a phone this panel is far below it
    if (window.__ttsRunStatus) window.__ttsRunStatus.set(name, text);
  }

  function update(stats) {
    if (stats && typeof stats === "object" && typeof stats.error === "string") {
      failed(stats.error);
      return;
    }
    if (!stats || typeof stats !== "object" || !("chunks" in stats)) return;
    if (run === null) begin("", performance.now());
    run.stats = stats;
    if (stats.done) state("done", stats.stop_reason === "cancelled" ? "Stopped" : "Done");
    render();
  }

  function render() {
    const s = run.stats || {};
    set("mode", run.label);
    set("heard", run.heardMs === null ? "–" : `${Math.round(run.heardMs)} ms`);
    set("engine", ms(s.time_to_first_audio_s));
    const rtf = s.real_time_factor;
    set("rtf", rtf === null || rtf === undefined ? "–" : `${rtf.toFixed(rtf < 0.1 ? 3 : 2)}×`);
    set("rtf-hint", rtf === null || rtf === undefined ? "compute ÷ audio" :
      rtf < 1 ? "faster than real time" : "slower than real time");
    set("audio", s.audio_s === undefined ? "–" : `${s.audio_s.toFixed(2)} s`);
    set("chunks", s.chunks === undefined ? "–" : `${s.chunks} chunks`);
    set("chunk", s.chunks ? `${ms(last(s.chunk_compute_s))} for ${ms(last(s.chunk_audio_s))}` : "–");
    set("queue", ms(s.queue_wait_s));
    const batch = last(s.chunk_batch_size || []);
    set("batch", s.chunks ? (batch === null ? "not batched" : String(batch)) : "–");
    set("underruns", run.underruns === null ? "–" :
      `${run.underruns}` + (run.underruns ? ` (${Math.round(run.silentMs)} ms silent)` : ""));
    set("model", [s.backend, s.model, s.weight_format, s.device].filter(Boolean).join(" · "));
    renderText(run.text);
    const notice = document.querySelector("#fallback-notice");
    const own = (s.notices || []).filter((n) => !(notice && notice.textContent.includes(n)));
    set("notices", own.join(" "));
    $("plot").innerHTML = plot(s.timeline || []);
    $("bars").innerHTML = bars(s.chunk_compute_s || [], s.chunk_audio_s || []);
  }

  // Where a player that starts at the first chunk is: it plays at real time and, when it has
  // played all it has received, waits (flat) for the next chunk. So at wall time t it is at
  // min(audio received by t, time since the first chunk minus the waits): never ahead of
  // "generated". timeline [[wall s, audio s so far], ...] -> [[wall s, played s], ...].
  function playbackCurve(timeline) {
    if (!timeline.length) return [];
    let [t, played] = [timeline[0][0], 0];
    const points = [[t, played]];
    timeline.forEach(([, received], i) => {
      const next = i + 1 < timeline.length ? timeline[i + 1][0] : Infinity; // the next chunk
      const dry = t + (received - played); // when it will have played all it has
      if (dry < next) { // plays up to `received`, then waits for the next chunk
        if (dry > t) points.push([dry, received]);
        if (next !== Infinity) points.push([next, received]);
        [t, played] = [next, received];
      } else { // still playing when the next chunk arrives
        [t, played] = [next, played + (next - t)];
        points.push([t, played]);
      }
    });
    return points;
  }

  // Audio produced vs wall-clock time, and the playback that audio allows (playbackCurve):
  // while "generated" stays above "playback" the listener never waits; a flat step is a wait.
  function plot(timeline) {
    const W = 400, H = 160, L = 30, R = 10, T = 6, B = 16;
    const generated = [[0, 0], ...timeline];
    const playback = playbackCurve(timeline);
    const points = generated.concat(playback);
    const xMax = Math.max(0.5, ...points.map((p) => p[0]));
    const yMax = Math.max(0.5, ...points.map((p) => p[1]));
    const x = (v) => (L + (v / xMax) * (W - L - R)).toFixed(1);
    const y = (v) => (H - B - (v / yMax) * (H - B - T)).toFixed(1);
    const path = (pts) => pts.map((p, i) => `${i ? "L" : "M"}${x(p[0])},${y(p[1])}`).join("");
    const ticks = [0, 0.5, 1].map((f) =>
      `<text x="${x(f * xMax)}" y="${H - 2}" text-anchor="middle">${(f * xMax).toFixed(1)}</text>` +
      `<text x="${L - 4}" y="${+y(f * yMax) + 4}" text-anchor="end">${(f * yMax).toFixed(1)}</text>` +
      `<line class="grid" x1="${L}" x2="${W - R}" y1="${y(f * yMax)}" y2="${y(f * yMax)}"/>`).join("");
    return `<svg ${SVG} viewBox="0 0 ${W} ${H}" role="img" aria-label="audio produced vs time">` +
      ticks +
      (playback.length ? `<path class="playback" d="${path(playback)}"/>` : "") +
      `<path class="generated" d="${path(generated)}"/></svg>`;
  }

  // Each chunk's compute time ÷ its audio length (the last 60); the line is real time.
  function bars(compute, audio) {
    const ratios = compute.map((c, i) => (audio[i] ? c / audio[i] : 0)).slice(-60);
    if (!ratios.length) return "";
    const W = 400, H = 56, top = Math.max(1.25, ...ratios), step = W / ratios.length;
    const y = (v) => (H - Math.max(1.5, (v / top) * H)).toFixed(1); // a bar stays visible
    const rects = ratios.map((r, i) =>
      `<rect class="${r > 1 ? "slow" : "fast"}" x="${(i * step + step * 0.15).toFixed(1)}" ` +
      `y="${y(r)}" width="${(step * 0.7).toFixed(1)}" height="${(H - y(r)).toFixed(1)}"/>`).join("");
    return `<svg ${SVG} viewBox="0 0 ${W} ${H}" role="img" aria-label="compute per chunk">` +
      `${rects}<line class="realtime" x1="0" x2="${W}" y1="${y(1)}" y2="${y(1)}"/>` +
      `<text x="${W}" y="${+y(1) - 3}" text-anchor="end">real time</text></svg>`;
  }

  // Standard player: heard = click -> the live <audio>'s first "playing" event.
  document.addEventListener("playing", (event) => {
    const live = event.target.closest && event.target.closest("#live-audio");
    if (live && run !== null && run.heardMs === null && element.dataset.state !== "idle") {
      heard(event.timeStamp - run.clickT);
    }
  }, true);

  // Text in (words sent / all) and audio out (after how many words it began, seconds received)
  function renderText(p) {
    const line = $("text-stream");
    if (!line) return;
    line.hidden = p === null;
    if (p === null) return;
    const first = p.firstAudioWord === null ? "no audio yet" :
      `first audio after ${p.firstAudioWord} word${p.firstAudioWord === 1 ? "" : "s"}`;
    set("text-in", `${p.sent} / ${p.total} words sent`);
    set("text-first", first);
    set("text-audio", `${p.audioS.toFixed(2)} s of audio received`);
  }

  function textStream(progress) { if (run) { run.text = { ...progress }; renderText(run.text); } }
  function heard(msAfterClick) { if (run) { run.heardMs = msAfterClick; render(); } }
  function underruns(n, silentMs) { if (run) { run.underruns = n; run.silentMs = silentMs; render(); } }
  function failed(message) {
    if (run) state("error", `Error: ${message}`);
    else if (window.__ttsRunStatus) window.__ttsRunStatus.set("error", `Error: ${message}`);
  }
  function stopped() { if (run && element.dataset.state === "running") state("stopped", "Stopped"); }

  element.dataset.state = "idle";
  window.__ttsStats = { begin, update, heard, underruns, failed, stopped, playbackCurve,
                        textStream, last: null };
})();
