// Serves the built page on 127.0.0.1: `web/dist` (the page, the module and the names
// model) at `/`, and the all-MiniLM-L6-v2 folder that `cargo xtask fetch minilm` fills at
// `/minilm/`. `cargo xtask web --serve` runs it; the browser test imports it.
//
//   node web/serve.mjs DIST MINILM_DIR [PORT]
import { createServer } from "node:http";
import { createReadStream, statSync } from "node:fs";
import { extname, join, normalize, resolve, sep } from "node:path";
import { pathToFileURL } from "node:url";

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".json": "application/json",
  ".wasm": "application/wasm",
  ".png": "image/png",
  ".txt": "text/plain; charset=utf-8",
};

/// Starts the server; resolves to it once it listens (its URL in `server.url`).
export function serve({ dist, minilm, port = 0 }) {
  const roots = [
    ["/minilm/", resolve(minilm)],
    ["/", resolve(dist)],
  ];
  const server = createServer((request, response) => {
    const path = decodeURIComponent(new URL(request.url, "http://x").pathname);
    const [prefix, root] = roots.find(([p]) => path.startsWith(p));
    let file = normalize(join(root, path.slice(prefix.length)));
    if (file !== root && !file.startsWith(root + sep)) {
      response.writeHead(403).end();
      return;
    }
    try {
      if (statSync(file).isDirectory()) file = join(file, "index.html");
      const size = statSync(file).size;
      response.writeHead(200, {
        "Content-Type": TYPES[extname(file)] ?? "application/octet-stream",
        "Content-Length": size,
        "Cache-Control": "no-store",
      });
      createReadStream(file).pipe(response);
    } catch {
      response.writeHead(404).end();
    }
  });
  return new Promise((done) =>
    server.listen(port, "127.0.0.1", () => {
      server.url = `http://127.0.0.1:${server.address().port}/`;
      done(server);
    }),
  );
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [dist, minilm, port] = process.argv.slice(2);
  if (!minilm) {
    console.error("usage: node serve.mjs DIST MINILM_DIR [PORT]");
    process.exit(2);
  }
  const server = await serve({ dist, minilm, port: Number(port ?? 8080) });
  console.log(`serving the page at ${server.url} (Ctrl-C stops)`);
}
