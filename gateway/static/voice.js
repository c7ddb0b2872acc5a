// The voice page: the microphone to /v1/realtime (OpenAI's Realtime protocol) and the
// answer played as it streams. Push to talk (hold the button: append, then commit and
// response.create) or hands-free (the server's VAD commits each turn and answers it;
// speech while the answer plays interrupts it, and the item is truncated at what was
// heard). The API key travels as the `openai-insecure-api-key.KEY` subprotocol (a
// browser cannot set headers on a WebSocket). Query parameters preset the form: key,
// model, mode (ptt | handsfree), params (JSON merged into session.update), connect=1.
// window.voiceState is what a test reads: captured and played audio, turns, errors.
"use strict";

const RATE = 24000;
const PCM = { type: "audio/pcm", rate: RATE };
const $ = (id) => document.getElementById(id);
const query = new URLSearchParams(location.search);
const state = window.voiceState = {
  connected: false, capturedMs: 0, playedSamples: 0, scheduledSamples: 0, turns: [], errors: [],
};
let ws = null, ctx = null, talking = false, responding = false, turn = null, playing = [], nextTime = 0, itemStart = 0;

function mode() { return document.querySelector("input[name=mode]:checked").value; }
function setStatus(text) { $("status").textContent = text; }
function send(event) { if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(event)); }

function b64(int16) {
  const bytes = new Uint8Array(int16.buffer, int16.byteOffset, int16.byteLength);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function newTurn(userText) {
  const div = document.createElement("div");
  div.className = "turn";
  div.innerHTML = '<div class="user"></div><div class="assistant"></div><div class="ttfa"></div>';
  div.querySelector(".user").textContent = "you: " + userText;
  $("turns").appendChild(div);
  turn = { user: userText, assistant: "", ttfaMs: null, started: performance.now(), div, itemId: "",
           capturedFrom: state.capturedMs };
  state.turns.push(turn);
  return turn;
}

async function startAudio() {
  ctx = new AudioContext({ sampleRate: RATE });
  await ctx.resume();
  try {
    const mic = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true } });
    await ctx.audioWorklet.addModule("/static/capture-worklet.js");
    const node = new AudioWorkletNode(ctx, "pcm16-capture", { numberOfOutputs: 0 });
    ctx.createMediaStreamSource(mic).connect(node);
    node.port.onmessage = (e) => {
      if (!(talking || mode() === "handsfree")) return;
      send({ type: "input_audio_buffer.append", audio: b64(new Int16Array(e.data)) });
      state.capturedMs += 100;
    };
  } catch (e) {
    fail("microphone: " + e.message);
  }
}

function play(base64) {
  const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
  const pcm = new Int16Array(bytes.buffer, 0, bytes.length >> 1);
  if (!pcm.length) return;
  const buffer = ctx.createBuffer(1, pcm.length, RATE);
  const data = buffer.getChannelData(0);
  for (let i = 0; i < pcm.length; i++) data[i] = pcm[i] / 32768;
  const source = ctx.createBufferSource();
  source.buffer = buffer;
  source.connect(ctx.destination);
  if (nextTime < ctx.currentTime) nextTime = ctx.currentTime + 0.05;
  if (!playing.length) itemStart = nextTime;
  source.start(nextTime);
  nextTime += buffer.duration;
  state.scheduledSamples += pcm.length;
  playing.push(source);
  source.onended = () => { state.playedSamples += pcm.length; playing = playing.filter((s) => s !== source); };
}

function stopPlayback() {
  // what was heard of the answer: the item is truncated there (the model forgets the rest)
  if (playing.length && turn && turn.itemId) {
    const heardMs = Math.max(0, Math.round((ctx.currentTime - itemStart) * 1000));
    send({ type: "conversation.item.truncate", item_id: turn.itemId, content_index: 0, audio_end_ms: heardMs });
  }
  for (const source of playing) { source.onended = null; try { source.stop(); } catch (e) { /* not started */ } }
  playing = [];
  nextTime = 0;
}

function fail(message) {
  state.errors.push(message);
  $("errors").textContent += message + "\n";
}

const handlers = {
  "session.created": () => {
    state.connected = true;
    $("talk").disabled = mode() !== "ptt";
    setStatus(mode() === "ptt" ? "connected: hold the button and speak" : "connected: speak");
  },
  "input_audio_buffer.speech_started": () => { stopPlayback(); newTurn("(speaking)"); },
  "input_audio_buffer.speech_stopped": () => { if (turn) turn.started = performance.now(); },
  "conversation.item.added": (e) => {
    if (e.item.role !== "user" || !turn) return;
    const words = e.item.content.map((c) => c.text || c.transcript || "").join(" ").trim();
    turn.user = words || `(${((state.capturedMs - turn.capturedFrom) / 1000).toFixed(1)} s of audio)`;
    turn.div.querySelector(".user").textContent = "you: " + turn.user;
  },
  "response.created": () => { responding = true; },
  "response.output_item.added": (e) => { if (turn) turn.itemId = e.item.id; },
  "response.output_audio.delta": (e) => {
    if (turn && turn.ttfaMs === null) {
      turn.ttfaMs = Math.round(performance.now() - turn.started);
      turn.div.querySelector(".ttfa").textContent = `time to first audio ${turn.ttfaMs} ms`;
    }
    play(e.delta);
  },
  "response.output_audio_transcript.delta": (e) => addWords(e.delta),
  "response.output_text.delta": (e) => addWords(e.delta),
  "response.done": (e) => { responding = false; setStatus(`answer ${e.response.status}`); },
  "error": (e) => fail(`${e.error.code || e.error.type}: ${e.error.message}` + (e.error.param ? ` (${e.error.param})` : "")),
};

function addWords(delta) {
  if (!turn) return;
  turn.assistant += delta;
  turn.div.querySelector(".assistant").textContent = "model: " + turn.assistant;
}

async function connect() {
  const key = $("key").value, model = $("model").value || await firstAudioModel(key);
  localStorage.setItem("starmesh-key", key);
  await startAudio();
  const url = `${location.origin.replace(/^http/, "ws")}/v1/realtime?model=${encodeURIComponent(model)}`;
  ws = new WebSocket(url, key ? ["realtime", "openai-insecure-api-key." + key] : ["realtime"]);
  ws.onopen = () => {
    let extra = {};
    try { extra = JSON.parse(query.get("params") || "{}"); } catch (e) { fail("params: " + e.message); }
    const detection = mode() === "handsfree" ? { type: "server_vad" } : null;
    send({ type: "session.update", session: { type: "realtime", output_modalities: ["audio"],
      audio: { input: { format: PCM, turn_detection: detection }, output: { format: PCM } }, ...extra } });
  };
  ws.onmessage = (m) => { const e = JSON.parse(m.data); (handlers[e.type] || (() => {}))(e); };
  ws.onclose = (e) => { state.connected = false; $("talk").disabled = true; setStatus(`closed (${e.code}) ${e.reason}`); };
}

async function firstAudioModel(key) {
  const reply = await fetch("/v1/models", { headers: key ? { Authorization: "Bearer " + key } : {} });
  const models = (await reply.json()).data || [];
  const audio = models.find((m) => (m.output_modalities || []).includes("audio"));
  if (!audio) throw new Error("no model here makes audio");
  $("model").value = audio.id;
  return audio.id;
}

function talk(on) {
  if (on === talking || !state.connected) return;
  talking = on;
  $("talk").classList.toggle("on", on);
  if (on) {
    stopPlayback();
    if (responding) send({ type: "response.cancel" });
    send({ type: "input_audio_buffer.clear" });
    newTurn("(speaking)");
  } else {
    turn.started = performance.now();
    send({ type: "input_audio_buffer.commit" });
    send({ type: "response.create" });
  }
}

$("talk").addEventListener("pointerdown", () => talk(true));
$("talk").addEventListener("pointerup", () => talk(false));
$("talk").addEventListener("pointerleave", () => talk(false));
$("connect").addEventListener("click", () => connect().catch((e) => fail(e.message)));
$("key").value = query.get("key") || localStorage.getItem("starmesh-key") || "";
$("model").value = query.get("model") || "";
if (query.get("mode") === "handsfree") document.querySelector("input[value=handsfree]").checked = true;
if (query.get("connect") === "1") connect().catch((e) => fail(e.message));
window.voiceTalk = talk;   // press (true) and release (false) the button from a script
