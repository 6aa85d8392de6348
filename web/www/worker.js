// The page's models run here, off the page's thread, so that the names can be shown
// letter by letter while they are sampled. Messages in: {id, kind, ...}; out: replies
// with the same id, and {kind: "letter"} as letters are sampled.
import init, { Names, Embedder, backend, use_backend, cosine_matrix } from "./pkg/zoo_web.js";

let names = null;
let embedder = null;

async function bytes(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return new Uint8Array(await response.arrayBuffer());
}

async function text(url, optional = false) {
  const response = await fetch(url);
  if (optional && response.status === 404) return "";
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.text();
}

const tasks = {
  async init() {
    const t0 = performance.now();
    await init();
    return { backend: backend(), ms: performance.now() - t0 };
  },
  // Models loaded from now on compute on `backend` ("flex" or "webgpu"); those loaded
  // before are dropped, and the page loads them again.
  async useBackend({ backend: name }) {
    const t0 = performance.now();
    const chosen = await use_backend(name);
    names?.free();
    embedder?.free();
    names = null;
    embedder = null;
    return { backend: chosen, ms: performance.now() - t0 };
  },
  async loadNames({ base }) {
    const t0 = performance.now();
    const [config, weights] = await Promise.all([
      text(`${base}/model.json`),
      bytes(`${base}/model.bpk`),
    ]);
    names = new Names(config, weights);
    return { ms: performance.now() - t0, bytes: weights.length, backend: backend() };
  },
  async sample({ id, prefix, n, temperature, topK, seed }) {
    if (!names) throw new Error("the names model is not loaded");
    const t0 = performance.now();
    let letters = 0;
    const out = await names.sample(prefix, n, temperature, topK, BigInt(seed), (row, letter) => {
      letters += 1;
      postMessage({ id, kind: "letter", row, letter });
    });
    return { names: out, letters, ms: performance.now() - t0 };
  },
  async loadMinilm({ base }) {
    const t0 = performance.now();
    const [modules, config, weights, pooling, sbert, tokenizer] = await Promise.all([
      text(`${base}/modules.json`),
      text(`${base}/config.json`),
      bytes(`${base}/model.safetensors`),
      text(`${base}/1_Pooling/config.json`),
      text(`${base}/sentence_bert_config.json`, true),
      text(`${base}/tokenizer.json`),
    ]);
    embedder = new Embedder(modules, config, weights, pooling, sbert, tokenizer);
    return { ms: performance.now() - t0, bytes: weights.length, backend: embedder.backend() };
  },
  async embed({ sentences }) {
    if (!embedder) throw new Error("the sentence model is not loaded");
    const t0 = performance.now();
    const flat = await embedder.embed(sentences);
    const ms = performance.now() - t0;
    const width = embedder.width();
    return {
      ms,
      width,
      embeddings: Array.from(flat),
      similarity: Array.from(cosine_matrix(flat, width)),
    };
  },
};

onmessage = async (event) => {
  const message = event.data;
  try {
    const result = await tasks[message.kind](message);
    postMessage({ id: message.id, kind: "done", result });
  } catch (error) {
    postMessage({ id: message.id, kind: "error", message: String(error?.message ?? error) });
  }
};
