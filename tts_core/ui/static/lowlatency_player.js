// Low-latency player: POSTs the request to the PCM route, reads the body with fetch streams and
// plays each PCM chunk the moment it arrives, gaplessly, with scheduled AudioBufferSourceNodes.
//
// "Speak while the text arrives": the same run, over the page's text-stream WebSocket instead
// (CFG.textRoute: session.config with the same fields, the text box's words as input.text at
// the chosen rate, input.done; the answer's binary frames are the same PCM).
//
// Runs as gr.HTML's js_on_load: `element` is the player's root. __CONFIG__ is replaced by the
// Python side with {route, textRoute, textStreamId, fields, mode, generateId,
// standardTriggerId, startLeadS, maxLeadS}.
// The stream's sample rate comes with each response (header X-Sample-Rate, or audio.start's
// sample_rate): the model's.
// Every run's numbers go to the page's stats panel (window.__ttsStats, stats_panel.js).
// window.__ttsLowLatency = {start(values), stop(), setMode(mode), level(), context(), last}
// values: [player mode, text streamed in?, words per second, ...the fields' values];
// "last": the metrics of the last run, read by the browser tests (a text-streamed run's
// m.text = {total, sent, firstAudioWord, audioS, wordsPerS, doneSent, closeCode}: firstAudioWord
// is how many words had been sent when the first audio frame arrived). Test hook:
// window.__ttsTextHoldAfter = N makes the feed wait after word N until the first audio frame
// has come (so "speech before the last word" is decided by events, not by the feed's rate).
(() => {
  const CFG = __CONFIG__;
  const panel = () => window.__ttsStats; // the shared stats panel (absent: nothing to show)
  const AUDIBLE = 0.001; // -60 dBFS: the first sample at least this loud counts as "heard"
  const $ = (name) => element.querySelector(`[data-ll="${name}"]`);
  let ctx = null;
  let current = null;
  let lastClick = null; // performance-timeline ms of the last click on Generate

  // A press elsewhere in the page (a user gesture) opens the audio device early so that Generate
  // does not pay for it; a press on Generate marks the click time (its handler sends the
  // request first and opens the device while the request is in flight).
  const warmUp = (event) => {
    if (event.target.closest && event.target.closest(`#${CFG.generateId}`)) {
      lastClick = event.timeStamp;
    } else {
      audioContext();
    }
  };
  document.addEventListener("pointerdown", warmUp, true);
  document.addEventListener("keydown", warmUp, true);

  function audioContext() {
    // Created/resumed inside the click handler: the click is the user gesture autoplay needs.
    // At the device's own rate: a stream's rate is known only once its response arrives,
    // and buffers of any rate play in any context (resampled by the browser).
    if (ctx === null) ctx = new AudioContext({ latencyHint: "interactive" });
    if (ctx.state !== "running") ctx.resume();
    return ctx;
  }

  function show(name, text) { const node = $(name); if (node) node.textContent = text; }

  class Run {
    constructor(clickT) {
      this.ctx = null; // attached right after the request is sent (opening it may take ~0.1 s)
      this.rate = null; // the stream's sample rate (X-Sample-Rate)
      this.out = null;
      this.abort = new AbortController();
      this.lead = CFG.startLeadS;
      this.nextFrame = null; // context sample frame where the next chunk starts
      this.sources = new Set();
      this.pcm = [];
      this.m = {
        clickT, firstSoundMs: null, firstAudibleMs: null, engineTtfaMs: null, underruns: 0,
        sentMs: null, headersMs: null, firstChunkMs: null, silentMs: 0, chunks: 0, samples: 0,
        schedule: [], done: false, error: null, // schedule: [start frame, frames] (context's)
        rate: null, contextRate: null, stopped: false, stats: null, endCtx: null, text: null,
      };
      this.socket = null; // the text-stream WebSocket (a text-streamed run)
      this.odd = null; // a PCM frame's last byte when its length was odd (the next one's first)
      element.dataset.state = "waiting";
    }

    attach(context) {
      this.ctx = context;
      this.out = context.createGain();
      this.out.connect(context.destination);
      this.meter = context.createAnalyser(); // the page can read what is being played
      this.out.connect(this.meter);
      this.m.contextRate = context.sampleRate;
    }

    // context time (s) -> performance timeline (ms), as heard: via the output timestamp
    perfAt(ctxTime) {
      const ts = this.ctx.getOutputTimestamp ? this.ctx.getOutputTimestamp() : null;
      if (ts && ts.performanceTime > 0) return ts.performanceTime + (ctxTime - ts.contextTime) * 1000;
      const latency = (this.ctx.outputLatency || 0) + (this.ctx.baseLatency || 0);
      return performance.now() + (ctxTime - this.ctx.currentTime + latency) * 1000;
    }

    play(int16) {
      const n = int16.length;
      if (n === 0) return;
      const floats = new Float32Array(n);
      let audible = -1;
      for (let i = 0; i < n; i++) {
        floats[i] = int16[i] / 32768;
        if (audible < 0 && Math.abs(floats[i]) >= AUDIBLE) audible = i;
      }
      const rate = this.ctx.sampleRate; // context frames; the chunk has this.rate samples/s
      const nowFrame = Math.ceil(this.ctx.currentTime * rate);
      const leadFrames = Math.round(this.lead * rate);
      if (this.nextFrame === null) {
        this.m.firstChunkMs = performance.now() - this.m.clickT;
        this.nextFrame = nowFrame + leadFrames;
        this.m.firstSoundMs = this.perfAt(this.nextFrame / rate) - this.m.clickT;
        if (panel()) panel().heard(this.m.firstSoundMs);
      } else if (this.nextFrame < nowFrame + 64) { // playback caught up with generation
        const gap = nowFrame + leadFrames - this.nextFrame;
        this.m.underruns += 1;
        this.m.silentMs += (gap / rate) * 1000;
        this.nextFrame += gap;
        this.lead = Math.min(this.lead + gap / rate, CFG.maxLeadS); // grow the jitter buffer
        if (panel()) panel().underruns(this.m.underruns, this.m.silentMs);
      }
      const startS = this.nextFrame / rate;
      if (this.m.firstAudibleMs === null && audible >= 0) {
        this.m.firstAudibleMs = this.perfAt(startS + audible / this.rate) - this.m.clickT;
      }
      const buffer = this.ctx.createBuffer(1, n, this.rate);
      buffer.copyToChannel(floats, 0);
      const source = this.ctx.createBufferSource();
      source.buffer = buffer;
      source.connect(this.out);
      source.onended = () => this.sources.delete(source);
      source.start(startS);
      this.sources.add(source);
      const frames = Math.round((n / this.rate) * rate);
      this.m.schedule.push([this.nextFrame, frames]);
      this.nextFrame += frames;
      this.m.endCtx = this.nextFrame / rate;
      this.m.chunks += 1;
      this.m.samples += n;
      this.pcm.push(int16);
      element.dataset.state = "playing";
    }

    onStats(stats) {
      this.m.stats = stats;
      if (stats.time_to_first_audio_s !== null && stats.time_to_first_audio_s !== undefined) {
        this.m.engineTtfaMs = stats.time_to_first_audio_s * 1000;
      }
      if (panel()) panel().update(stats);
    }

    async fetchAndPlay(body) {
      show("status", "Generating…");
      this.m.sentMs = performance.now() - this.m.clickT;
      const request = fetch(CFG.route, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body), signal: this.abort.signal, cache: "no-store", priority: "high",
      });
      this.attach(audioContext()); // still inside the click's user activation
      const response = await request;
      this.m.headersMs = performance.now() - this.m.clickT;
      if (!response.ok) {
        const answer = await response.json().catch(() => null);
        throw new Error((answer && answer.error && answer.error.message) || `HTTP ${response.status}`);
      }
      this.rate = this.m.rate = Number(response.headers.get("X-Sample-Rate"));
      if (!(this.rate > 0)) throw new Error("the response has no X-Sample-Rate");
      const reader = response.body.getReader();
      let pending = new Uint8Array(0);
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        pending = concat(pending, value);
        pending = this.consumeFrames(pending);
      }
      this.finish();
    }

    consumeFrames(bytes) {
      let offset = 0;
      while (bytes.length - offset >= 8) {
        const view = new DataView(bytes.buffer, bytes.byteOffset + offset, 8);
        const kind = view.getUint32(0, true);
        const size = view.getUint32(4, true);
        if (bytes.length - offset - 8 < size) break;
        const payload = bytes.slice(offset + 8, offset + 8 + size); // own, aligned buffer
        offset += 8 + size;
        if (kind === 1) this.play(new Int16Array(payload.buffer, 0, size >> 1));
        else if (kind === 2) this.onStats(JSON.parse(new TextDecoder().decode(payload)));
        else if (kind === 3) throw new Error(JSON.parse(new TextDecoder().decode(payload)).message);
      }
      return bytes.slice(offset);
    }

    finish() {
      this.m.done = true;
      const left = Math.max(0, (this.m.endCtx || 0) - this.ctx.currentTime);
      const stopped = this.m.stats && this.m.stats.stop_reason === "cancelled";
      show("status", stopped ? "Stopped" : `Generated; playing (${left.toFixed(1)} s left)`);
      setTimeout(() => {
        if (current === this && !this.m.stopped) { show("status", "Done"); element.dataset.state = "done"; }
      }, left * 1000);
      this.offerDownload();
    }

    offerDownload() {
      const link = $("download");
      if (!link || this.pcm.length === 0) return;
      const blob = wavBlob(this.pcm, this.rate);
      if (link.href) URL.revokeObjectURL(link.href);
      link.href = URL.createObjectURL(blob);
      link.hidden = false;
      const replay = $("replay");
      if (replay) { replay.src = link.href; replay.hidden = false; }
    }

    // ---- text streamed in: the text box's words over the page's WebSocket
    async streamText(body, wordsPerS) {
      const words = String(body.text || "").match(/\S+\s*/g) || []; // each with its spaces
      if (words.length === 0) throw new Error("Type some text first.");
      if (!(wordsPerS > 0)) throw new Error("The words-per-second rate must be above 0.");
      const t = this.m.text = { total: words.length, sent: 0, firstAudioWord: null, audioS: 0,
                                wordsPerS, doneSent: false, closeCode: null };
      // settles at the first audio frame, at Stop, or when the socket ends (the test hook's wait)
      this.firstAudio = new Promise((resolve) => {
        this.heard = resolve;
        this.abort.signal.addEventListener("abort", resolve, { once: true });
      });
      this.progress();
      show("status", "Sending the text word by word…");
      this.m.sentMs = performance.now() - this.m.clickT;
      const url = new URL(CFG.textRoute, location.href);
      url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
      const socket = this.socket = new WebSocket(url);
      socket.binaryType = "arraybuffer";
      this.attach(audioContext()); // still inside the click's user activation
      const ended = this.listen(socket);
      ended.then(() => this.heard(), () => this.heard());
      const opened = new Promise((resolve) => socket.addEventListener("open", resolve, { once: true }));
      await Promise.race([opened, ended]); // a refused or failed connection ends the run
      this.m.headersMs = performance.now() - this.m.clickT;
      const config = { ...body, type: "session.config" };
      delete config.text;
      socket.send(JSON.stringify(config));
      this.feed(socket, words, wordsPerS).catch(() => socket.close()); // (sending failed: closed)
      await ended;
      if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "session.close" }));
      this.finish();
    }

    // input.text per word, one every 1/wordsPerS s, then input.done (ends early on Stop or close)
    async feed(socket, words, wordsPerS) {
      const t = this.m.text;
      for (let i = 0; i < words.length; i++) {
        if (this.m.stopped || socket.readyState !== WebSocket.OPEN) return;
        socket.send(JSON.stringify({ type: "input.text", text: words[i] }));
        t.sent = i + 1;
        this.progress();
        if (t.sent === window.__ttsTextHoldAfter) await this.firstAudio;
        if (i + 1 < words.length) await this.pause(1000 / wordsPerS);
      }
      if (this.m.stopped || socket.readyState !== WebSocket.OPEN) return;
      socket.send(JSON.stringify({ type: "input.done" }));
      t.doneSent = true;
      show("status", "Text sent; speaking…");
    }

    pause(ms) { // a timer that Stop cuts short
      return new Promise((resolve) => {
        const timer = setTimeout(resolve, ms);
        this.abort.signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); },
                                           { once: true });
      });
    }

    // The server's messages -> a promise: resolved at session.done, rejected at error or close
    listen(socket) {
      return new Promise((resolve, reject) => {
        let ended = false;
        const fail = (err) => { if (!ended) { ended = true; reject(err); socket.close(); } };
        socket.addEventListener("message", (event) => {
          if (ended) return;
          try {
            if (typeof event.data !== "string") { this.onPcm(event.data); return; }
            const message = JSON.parse(event.data);
            if (message.type === "audio.start") {
              this.rate = this.m.rate = Number(message.sample_rate);
              if (!(this.rate > 0)) throw new Error("audio.start has no sample_rate");
            } else if (message.type === "session.done") {
              ended = true;
              if (message.stats) this.onStats(message.stats);
              resolve();
            } else if (message.type === "error") {
              fail(new Error(message.message || "the text stream failed"));
            }
          } catch (err) {
            fail(err);
          }
        });
        socket.addEventListener("close", (event) => {
          this.m.text.closeCode = event.code;
          fail(new Error(`the connection closed (code ${event.code})`));
        });
      });
    }

    onPcm(buffer) {
      let bytes = new Uint8Array(buffer);
      if (this.odd !== null) { bytes = concat(this.odd, bytes); this.odd = null; }
      if (bytes.length % 2) { this.odd = bytes.slice(-1); bytes = bytes.slice(0, -1); }
      if (!(this.rate > 0)) throw new Error("audio came before audio.start");
      const t = this.m.text;
      if (t.firstAudioWord === null && bytes.length) { t.firstAudioWord = t.sent; this.heard(); }
      this.play(new Int16Array(bytes.buffer, bytes.byteOffset, bytes.length >> 1));
      t.audioS = this.m.samples / this.rate;
      this.progress();
    }

    progress() { if (panel() && panel().textStream) panel().textStream(this.m.text); }

    stop() {
      this.m.stopped = true;
      // the server sees the disconnect (or the closed socket) and stops the synthesis
      if (this.socket !== null && this.socket.readyState <= WebSocket.OPEN) this.socket.close(1000);
      this.abort.abort();
      for (const source of this.sources) { try { source.stop(); } catch (err) { /* not started */ } }
      this.sources.clear();
    }
  }

  // Hide the last run's replay and download (offerDownload shows this run's when it ends).
  function clearResult() {
    const link = $("download");
    if (link) {
      link.hidden = true;
      if (link.href) URL.revokeObjectURL(link.href);
      link.removeAttribute("href");
    }
    const replay = $("replay");
    if (replay) { replay.pause(); replay.removeAttribute("src"); replay.load(); replay.hidden = true; }
  }

  function concat(a, b) {
    if (a.length === 0) return b;
    const joined = new Uint8Array(a.length + b.length);
    joined.set(a, 0);
    joined.set(b, a.length);
    return joined;
  }

  function wavBlob(chunks, rate) {
    const samples = chunks.reduce((sum, c) => sum + c.length, 0);
    const header = new DataView(new ArrayBuffer(44));
    const text = (at, s) => { for (let i = 0; i < s.length; i++) header.setUint8(at + i, s.charCodeAt(i)); };
    text(0, "RIFF"); header.setUint32(4, 36 + samples * 2, true); text(8, "WAVE");
    text(12, "fmt "); header.setUint32(16, 16, true); header.setUint16(20, 1, true);
    header.setUint16(22, 1, true); header.setUint32(24, rate, true);
    header.setUint32(28, rate * 2, true); header.setUint16(32, 2, true);
    header.setUint16(34, 16, true); text(36, "data"); header.setUint32(40, samples * 2, true);
    return new Blob([header, ...chunks], { type: "audio/wav" });
  }

  function requestBody(values) {
    const body = {};
    CFG.fields.forEach((name, i) => { body[name] = values[i]; });
    if (body.reference && typeof body.reference === "object") body.reference = body.reference.path || null;
    return body;
  }

  async function start(values) {
    const clickT = lastClick !== null && performance.now() - lastClick < 2000 ? lastClick : performance.now();
    lastClick = null;
    const [mode, textStreamed, wordsPerS] = values;
    const standard = mode !== CFG.mode;
    const label = standard ? "Standard player" :
      textStreamed ? "Low-latency player, text streamed in" : "Low-latency player";
    if (panel()) panel().begin(label, clickT);
    if (standard) { // the standard gr.Audio player is selected: run its event
      stop();
      const trigger = document.getElementById(CFG.standardTriggerId);
      if (trigger) (trigger.tagName === "BUTTON" ? trigger : trigger.querySelector("button")).click();
      return;
    }
    stop();
    if (panel()) panel().underruns(0, 0); // counted by this player only
    const run = new Run(clickT);
    current = run;
    window.__ttsLowLatency.last = run.m;
    clearResult(); // the last run's clip must not stay next to this run's outcome
    try {
      const body = requestBody(values.slice(3));
      await (textStreamed ? run.streamText(body, Number(wordsPerS)) : run.fetchAndPlay(body));
    } catch (err) {
      if (run.m.stopped) { show("status", "Stopped"); element.dataset.state = "stopped"; return; }
      run.m.error = String(err.message || err);
      show("status", `Error: ${run.m.error}`);
      if (panel()) panel().failed(run.m.error);
      element.dataset.state = "error";
    }
  }

  function stop() {
    if (current !== null && !current.m.stopped) {
      const generated = current.m.done; // the stats panel says "Done": only playback ends here
      current.stop();
      show("status", generated ? "Playback stopped (the speech was fully generated)" : "Stopped");
      element.dataset.state = "stopped";
    }
  }

  // The player's own controls show in low-latency mode only (the stats panel is shared).
  function setMode(mode) {
    const display = mode === CFG.mode ? "" : "none";
    (element.closest("#lowlatency-player") || element).style.display = display;
    const options = document.getElementById(CFG.textStreamId);
    if (options) options.style.display = display;
  }

  // Peak of the samples being output right now (0 when silent or idle).
  function level() {
    if (current === null || !current.meter) return 0;
    const samples = new Float32Array(current.meter.fftSize);
    current.meter.getFloatTimeDomainData(samples);
    return samples.reduce((peak, x) => Math.max(peak, Math.abs(x)), 0);
  }

  window.__ttsLowLatency = { start, stop, setMode, level, last: null, context: () => ctx };
})();
