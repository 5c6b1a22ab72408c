// A chat-completions gateway on node:http, as a team outside Python writes one: OpenAI-shaped
// SSE chunks from POST /v1/chat/completions, /readyz, and the port it bound (port 0 unless
// --port) on its listening line.
//
// --incident picks the one thing wrong with it, or a look-alike of one (healthy: nothing):
//   blocked_loop   a synchronous call (a sync SDK, a sync crypto or file call) every 5 tokens:
//                  the event loop serves nothing else meanwhile;
//   held_open      after data: [DONE] the response is ended only when its usage report is sent;
//   total_timeout  a request budget: every response is destroyed 1.2 s after its request came;
//   bursts         the response is written through a 4 KB coalescing buffer (one write per
//                  4 KB, as io.Copy through a bufio.Writer or a batching transform does);
//   one_slot       one generation at a time (a promise chain in front of the model).
const http = require("http");

const option = (name, fallback) =>
  process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : fallback;
const incident = option("--incident", "healthy");
const port = Number(option("--port", "0"));

const TOKEN_MS = 20;
const BLOCK_EVERY = 5;
const BLOCK_MS = 150;
const USAGE_REPORT_MS = 1500;
const BUDGET_MS = 1200;
const BURST_BYTES = 4096;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
// A synchronous wait: nothing else on this thread runs until it returns.
const blockFor = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

const chunk = (text, finish = null) => {
  const delta = text === null ? {} : { content: text };
  const body = {
    id: "chatcmpl-1",
    object: "chat.completion.chunk",
    model: "team-model",
    choices: [{ index: 0, delta, finish_reason: finish }],
  };
  return "data: " + JSON.stringify(body) + "\n\n";
};

// Writes through a buffer that goes out only once BURST_BYTES are in it (or at the end).
const coalescing = (res) => {
  let pending = "";
  return {
    write(text) {
      pending += text;
      if (Buffer.byteLength(pending) >= BURST_BYTES) {
        res.write(pending);
        pending = "";
      }
    },
    end(text) {
      res.end(pending + text);
    },
  };
};

let slot = Promise.resolve();

async function generate(tokens, out, closed) {
  for (let index = 0; index < tokens && !closed(); index++) {
    await sleep(TOKEN_MS);
    if (incident === "blocked_loop" && index % BLOCK_EVERY === BLOCK_EVERY - 1) {
      blockFor(BLOCK_MS);
    }
    out.write(chunk("tok" + index + " "));
  }
}

async function completions(req, res) {
  let raw = "";
  for await (const part of req) raw += part;
  const body = JSON.parse(raw || "{}");
  let closed = false;
  res.on("close", () => {
    closed = true;
  });
  if (incident === "total_timeout") {
    const budget = setTimeout(() => res.destroy(), BUDGET_MS);
    res.on("close", () => clearTimeout(budget));
  }
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  const out = incident === "bursts" ? coalescing(res) : res;
  const run = () => generate(body.max_tokens ?? 16, out, () => closed);
  if (incident === "one_slot") {
    const mine = slot.then(run);
    slot = mine.catch(() => {});
    await mine;
  } else {
    await run();
  }
  if (closed) return;
  out.write(chunk(null, "stop"));
  if (incident === "held_open") {
    res.write("data: [DONE]\n\n");
    await sleep(USAGE_REPORT_MS);
    res.end();
  } else {
    out.end("data: [DONE]\n\n");
  }
}

const server = http.createServer((req, res) => {
  if (req.url === "/readyz") {
    res.end("ok");
    return;
  }
  if (req.method === "POST" && req.url === "/v1/chat/completions") {
    completions(req, res).catch(() => res.destroy());
    return;
  }
  res.writeHead(404).end();
});

server.listen(port, "127.0.0.1", () => {
  console.log("listening on http://127.0.0.1:" + server.address().port);
});
