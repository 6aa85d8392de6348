// The page: sends work to the worker (worker.js) and draws what comes back. What it
// measured is kept in `window.zoo` for the browser test.
const worker = new Worker("worker.js", { type: "module" });
const pending = new Map();
let nextId = 1;
const letterHandlers = new Map();

worker.onmessage = (event) => {
  const m = event.data;
  if (m.kind === "letter") {
    letterHandlers.get(m.id)?.(m.row, m.letter);
    return;
  }
  const waiter = pending.get(m.id);
  if (!waiter) return;
  pending.delete(m.id);
  letterHandlers.delete(m.id);
  if (m.kind === "error") waiter.reject(new Error(m.message));
  else waiter.resolve(m.result);
};

function call(kind, args = {}, onLetter = null) {
  const id = nextId++;
  if (onLetter) letterHandlers.set(id, onLetter);
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    worker.postMessage({ id, kind, ...args });
  });
}

const $ = (id) => document.getElementById(id);
// `call` is there for the browser test's timed runs.
const zoo = (window.zoo = { ready: false, errors: [], call });

function showError(target, error) {
  const el = $(target);
  el.classList.add("error");
  el.textContent = `error: ${error.message}`;
  zoo.errors.push(error.message);
}

async function sampleNames() {
  const out = $("names-out");
  const status = $("names-status");
  status.classList.remove("error");
  out.textContent = "";
  const prefix = $("prefix").value.trim().toLowerCase();
  const n = Number($("count").value);
  const rows = [];
  for (let i = 0; i < n; i++) {
    const div = document.createElement("div");
    div.textContent = prefix;
    out.appendChild(div);
    rows.push(div);
  }
  status.textContent = "sampling…";
  $("sample").disabled = true;
  try {
    const r = await call(
      "sample",
      {
        prefix,
        n,
        temperature: Number($("temperature").value),
        topK: Number($("top-k").value),
        seed: Number($("seed").value),
      },
      (row, letter) => {
        if (letter !== "$") rows[row].textContent += letter;
      },
    );
    r.names.forEach((name, i) => (rows[i].textContent = name));
    const secs = r.ms / 1000;
    status.textContent = `${r.names.length} names in ${secs.toFixed(2)} s: ` +
      `${(r.names.length / secs).toFixed(1)} names/s, ${(r.letters / secs).toFixed(0)} letters/s`;
    zoo.names = { ...r, prefix, namesPerSecond: r.names.length / secs };
  } catch (e) {
    showError("names-status", e);
  } finally {
    $("sample").disabled = false;
  }
}

function drawHeatmap(sim, n) {
  const canvas = $("heatmap");
  const ctx = canvas.getContext("2d");
  const cell = canvas.width / n;
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < n; j++) {
      const v = Math.max(0, Math.min(1, sim[i * n + j]));
      // White at 0 to deep blue at 1.
      const c = Math.round(255 * (1 - v));
      ctx.fillStyle = `rgb(${c}, ${Math.round(120 + 135 * (1 - v))}, 255)`;
      ctx.fillRect(j * cell, i * cell, cell, cell);
      ctx.fillStyle = v > 0.55 ? "white" : "black";
      ctx.font = `${Math.max(10, Math.min(16, cell / 4))}px system-ui`;
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText(sim[i * n + j].toFixed(2), (j + 0.5) * cell, (i + 0.5) * cell);
    }
  }
}

function drawTable(sentences, sim) {
  const n = sentences.length;
  const short = (s) => (s.length > 28 ? s.slice(0, 27) + "…" : s);
  let html = "<table class=sim><tr><th></th>";
  for (let j = 0; j < n; j++) html += `<th>${j + 1}</th>`;
  html += "</tr>";
  for (let i = 0; i < n; i++) {
    html += `<tr><th title="${sentences[i].replace(/"/g, "&quot;")}">${i + 1}. ${short(sentences[i])
      .replace(/&/g, "&amp;").replace(/</g, "&lt;")}</th>`;
    for (let j = 0; j < n; j++) html += `<td>${sim[i * n + j].toFixed(3)}</td>`;
    html += "</tr>";
  }
  $("sim-table").innerHTML = html + "</table>";
}

async function compare() {
  const status = $("sim-status");
  status.classList.remove("error");
  const sentences = $("sentences").value.split("\n").map((s) => s.trim()).filter((s) => s);
  if (sentences.length === 0) {
    showError("sim-status", new Error("type at least one sentence"));
    return;
  }
  $("compare").disabled = true;
  status.textContent = "embedding…";
  try {
    const r = await call("embed", { sentences });
    drawHeatmap(r.similarity, sentences.length);
    drawTable(sentences, r.similarity);
    const secs = r.ms / 1000;
    status.textContent = `${sentences.length} sentences embedded in ${secs.toFixed(2)} s: ` +
      `${(sentences.length / secs).toFixed(1)} embeddings/s (width ${r.width})`;
    zoo.similarity = { ...r, sentences, embeddingsPerSecond: sentences.length / secs };
  } catch (e) {
    showError("sim-status", e);
  } finally {
    $("compare").disabled = false;
  }
}

// Loads both models on the worker's current backend and enables their buttons.
async function loadModels() {
  const t0 = performance.now();
  $("sample").disabled = true;
  $("compare").disabled = true;
  $("names-status").classList.remove("error");
  $("sim-status").classList.remove("error");
  $("names-status").textContent = "loading the model…";
  $("sim-status").textContent = "loading the model…";
  const [namesLoad, minilmLoad] = [
    call("loadNames", { base: "names-model" }),
    call("loadMinilm", { base: "minilm" }),
  ];
  try {
    const r = await namesLoad;
    zoo.namesLoadMs = r.ms;
    $("names-status").textContent = `model loaded in ${r.ms.toFixed(0)} ms on ${r.backend}`;
    $("sample").disabled = false;
  } catch (e) {
    showError("names-status", e);
  }
  try {
    const r = await minilmLoad;
    zoo.minilmLoadMs = r.ms;
    $("sim-status").textContent = `model loaded in ${(r.ms / 1000).toFixed(2)} s on ` +
      `${r.backend} (${(r.bytes / 2 ** 20).toFixed(0)} MiB of weights)`;
    $("compare").disabled = false;
  } catch (e) {
    showError("sim-status", e);
  }
  return performance.now() - t0;
}

function backendLabel(name) {
  if (name === "flex") return "flex (wasm32, SIMD128, on the CPU)";
  if (name === "webgpu") return `WebGPU (adapter: ${zoo.adapter || "this browser's GPU"})`;
  return name;
}

function showBackend(name) {
  zoo.backend = name;
  $("backend").textContent = backendLabel(name);
  $("backend-choice").value = name;
}

// The backend chosen on the page: the models move there, loaded again.
async function switchBackend() {
  const choice = $("backend-choice");
  const wanted = choice.value;
  const previous = zoo.backend;
  choice.disabled = true;
  zoo.ready = false;
  zoo.names = null;
  zoo.similarity = null;
  try {
    const r = await call("useBackend", { backend: wanted });
    showBackend(r.backend);
    zoo.switchMs = r.ms;
    zoo.loadMs = r.ms + (await loadModels());
  } catch (e) {
    showError("names-status", e);
    showBackend(previous);
  }
  choice.disabled = false;
  zoo.ready = true;
}

async function start() {
  const choice = $("backend-choice");
  const webgpu = choice.querySelector("option[value=webgpu]");
  if (!navigator.gpu) {
    webgpu.disabled = true;
    webgpu.textContent += " (not in this browser)";
  }
  zoo.webgpu = Boolean(navigator.gpu);
  if (navigator.gpu) {
    // The adapter's name, so that a software one (SwiftShader) is not taken for a GPU.
    try {
      const info = (await navigator.gpu.requestAdapter())?.info;
      zoo.adapter = [info?.vendor, info?.architecture, info?.description].filter((x) => x).join(" ");
    } catch {
      zoo.adapter = "";
    }
  }
  // `?backend=webgpu` starts there.
  const asked = new URLSearchParams(location.search).get("backend") ?? "flex";
  try {
    const t0 = performance.now();
    const ready = await call("init");
    showBackend(ready.backend);
    if (asked !== ready.backend) showBackend((await call("useBackend", { backend: asked })).backend);
    await loadModels();
    zoo.loadMs = performance.now() - t0;
  } catch (e) {
    showError("names-status", e);
  }
  choice.disabled = false;
  zoo.ready = true;
}

$("backend-choice").addEventListener("change", switchBackend);
$("sample").addEventListener("click", sampleNames);
$("compare").addEventListener("click", compare);
start();
