// The browser test: serves the built page, drives headless Chromium through it as a
// person would (types a prefix and samples names, enters sentences and compares them),
// checks what the page showed against the native programs' output, takes a screenshot,
// then times the page against the native timings and prints the ratios. What the page
// showed is written as JSON. `cargo xtask web --test` runs the native programs and then
// this script.
//
//   node web/test/e2e.mjs SETTINGS_JSON OUT_JSON SCREENSHOT_PNG
import { readFileSync, writeFileSync } from "node:fs";
import { chromium } from "playwright-core";
import { serve } from "../serve.mjs";

const [settingsPath, outPath, screenshotPath] = process.argv.slice(2);
const s = JSON.parse(readFileSync(settingsPath, "utf8"));
const server = await serve({ dist: s.dist, minilm: s.minilm });
const browser = await chromium.launch({
  executablePath: s.chromium,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    // WebGPU: on a machine without a GPU, Chromium's own SwiftShader adapter.
    "--enable-unsafe-webgpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
  ],
});
const out = { console: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 1250 } });
  page.on("console", (m) => out.console.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => out.console.push(`pageerror: ${e.message}`));
  const t0 = Date.now();
  await page.goto(server.url);
  await page.waitForFunction(() => window.zoo?.ready, null, { timeout: 300_000 });
  out.pageLoadMs = Date.now() - t0;
  out.loadMs = await page.evaluate(() => window.zoo.loadMs);
  const load = await page.evaluate(() => ({ ...window.zoo, call: undefined }));
  if (load.errors.length) throw new Error(`the page failed to load: ${load.errors.join("; ")}`);
  Object.assign(out, {
    backend: load.backend,
    namesLoadMs: load.namesLoadMs,
    minilmLoadMs: load.minilmLoadMs,
  });

  // On flex, then on WebGPU, chosen on the page as a person would.
  out.flex = await exercise(page, s, "flex");
  await page.screenshot({ path: screenshotPath.replace(/\.png$/, "-flex.png"), fullPage: true });
  report(out.flex, s, "flex");
  if (!(await page.evaluate(() => window.zoo.webgpu))) {
    throw new Error("this browser has no WebGPU (navigator.gpu); the test needs it");
  }
  await page.selectOption("#backend-choice", "webgpu");
  await page.waitForFunction(() => window.zoo.ready && window.zoo.backend === "webgpu", null, {
    timeout: 300_000,
  });
  const switched = await page.evaluate(() => ({ ...window.zoo, call: undefined }));
  if (switched.errors.length) throw new Error(`the page failed to switch to WebGPU: ${switched.errors.join("; ")}`);
  out.webgpuLoadMs = switched.loadMs;
  out.webgpu = await exercise(page, s, "webgpu");
  await page.screenshot({ path: screenshotPath, fullPage: true });
  report(out.webgpu, s, "webgpu");
} catch (e) {
  out.error = String(e?.message ?? e);
} finally {
  await browser.close();
  server.close();
}
writeFileSync(outPath, JSON.stringify(out, null, 1));

/// Samples names and compares sentences on the page's current backend, checks both
/// against the native runs (with the negative controls), then times them through the
/// page's worker. Returns what the page showed and measured.
async function exercise(page, s, backend) {
  const shown = await page.evaluate(() => window.zoo.backend);
  if (shown !== backend) throw new Error(`the page computes on ${shown}, not ${backend}`);
  await page.fill("#prefix", s.prefix);
  await page.fill("#temperature", String(s.temperature));
  await page.fill("#top-k", String(s.topK));
  await page.fill("#count", String(s.samples));
  await page.fill("#seed", String(s.seed));
  await page.click("#sample");
  await page.waitForFunction(() => window.zoo.names || window.zoo.errors.length, null, {
    timeout: 300_000,
  });
  await page.fill("#sentences", s.sentences.join("\n"));
  await page.click("#compare");
  await page.waitForFunction(() => window.zoo.similarity || window.zoo.errors.length, null, {
    timeout: 300_000,
  });
  const done = await page.evaluate(() => ({ ...window.zoo, call: undefined }));
  if (done.errors.length) throw new Error(`the page reported: ${done.errors.join("; ")}`);
  const out = { backend: done.backend, loadMs: done.loadMs };
  out.names = done.names;
  out.similarity = done.similarity;
  out.shown = {
    names: await page.locator("#names-out div").allTextContents(),
    namesStatus: await page.textContent("#names-status"),
    simStatus: await page.textContent("#sim-status"),
  };
  check(out, s, backend);
  // Negative controls: the same check rejects the names out of order, and one embedding
  // value moved by 2e-4 (twice the bound).
  const moved = out.similarity.embeddings.map((x, i) => (i === 0 ? x + 2e-4 : x));
  const controls = [
    ["the names reversed", { ...out, names: { ...out.names, names: [...out.names.names].reverse() } }],
    ["one embedding value moved by 2e-4", { ...out, similarity: { ...out.similarity, embeddings: moved } }],
  ];
  for (const [what, bad] of controls) {
    let rejected = false;
    try {
      check(bad, s, backend, true);
    } catch {
      rejected = true;
    }
    if (!rejected) throw new Error(`the check accepted ${what}`);
  }
  console.log(`web: ${backend}: negative controls: the check rejects the names reversed and an embedding moved by 2e-4`);

  // Timed runs through the page's worker, the median kept; fewer and smaller on
  // WebGPU, which runs here on Chromium's software adapter.
  const sizes = backend === "flex" ? s.bench : s.benchWebgpu;
  out.bench = await page.evaluate(
    async ([s, sizes]) => {
      const med = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
      const namesMs = [];
      const embedMs = [];
      const sentences = Array.from({ length: sizes.sentences }, (_, i) => s.sentences[i % s.sentences.length]);
      for (let i = 0; i < sizes.runs; i++) {
        const r = await window.zoo.call("sample", {
          prefix: s.prefix, n: sizes.names, temperature: s.temperature, topK: s.topK, seed: s.seed + i,
        });
        namesMs.push(r.ms);
        embedMs.push((await window.zoo.call("embed", { sentences })).ms);
      }
      return {
        ...sizes,
        namesPerSecond: sizes.names / (med(namesMs) / 1000),
        embeddingsPerSecond: sizes.sentences / (med(embedMs) / 1000),
      };
    },
    [s, sizes],
  );
  return out;
}

/// Throws unless the page's names equal the native run's and its embeddings are within
/// 1e-4 of `zoo embed`'s; `quiet` for the negative controls, which print nothing.
function check(out, s, backend, quiet = false) {
  const native = readFileSync(s.nativeNames, "utf8").split("\n").filter((l) => l.trim());
  const page = out.names.names;
  const shown = out.shown.names;
  if (JSON.stringify(page) !== JSON.stringify(native) || JSON.stringify(shown) !== JSON.stringify(native)) {
    throw new Error(`${backend}: names differ from the native run's:\n page:   ${page.join(" ")}\n shown:  ${shown.join(" ")}\n native: ${native.join(" ")}`);
  }
  if (!quiet) console.log(`web: ${backend}: the page's ${page.length} names equal the native run's: ${page.join(" ")}`);
  const want = JSON.parse(readFileSync(s.nativeEmbeddings, "utf8")).embeddings.flat(Infinity);
  const got = out.similarity.embeddings;
  if (want.length !== got.length) {
    throw new Error(`the page gave ${got.length} embedding values, zoo embed ${want.length}`);
  }
  let worst = 0;
  want.forEach((w, i) => (worst = Math.max(worst, Math.abs(w - got[i]))));
  out.maxEmbeddingDiff = worst;
  if (!(worst <= 1e-4)) {
    throw new Error(`${backend}: embeddings differ from zoo embed's by up to ${worst}, more than 1e-4`);
  }
  if (!quiet) console.log(`web: ${backend}: the page's ${got.length / out.similarity.width} embeddings are within ${worst.toExponential(1)} of zoo embed's (bound 1e-4)`);
}

/// Prints the page's timings beside the native ones, as ratios of time (page / native).
function report(out, s, backend) {
  const n = s.native;
  const nativeLoad = n.namesProcessSecs + n.embedProcessSecs;
  const lines = [
    ["load, to both models ready", `${(out.loadMs / 1000).toFixed(2)} s`, `${nativeLoad.toFixed(2)} s`, (out.loadMs / 1000) / nativeLoad],
    [`names sampled (${out.bench.names} a run)`, `${out.bench.namesPerSecond.toFixed(0)}/s`, `${n.namesPerSecond.toFixed(0)}/s`, n.namesPerSecond / out.bench.namesPerSecond],
    [`sentences embedded (${out.bench.sentences} a run)`, `${out.bench.embeddingsPerSecond.toFixed(1)}/s`, `${n.embeddingsPerSecond.toFixed(1)}/s`, n.embeddingsPerSecond / out.bench.embeddingsPerSecond],
  ];
  const on = backend === "flex" ? "wasm32, flex, one thread" : "wasm32, WebGPU";
  console.log(`web: the page (${on}) against the native flex build, time ratio page / native:`);
  for (const [what, page, native, ratio] of lines) {
    console.log(`  ${what.padEnd(34)} page ${page.padStart(9)}   native ${native.padStart(9)}   ${ratio.toFixed(2)}`);
  }
  out.ratios = Object.fromEntries(lines.map(([what, , , ratio]) => [what, ratio]));
}
if (out.error) {
  console.error(`error: ${out.error}`);
  process.exit(1);
}
