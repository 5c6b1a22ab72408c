// An API gateway on node:http in front of a model server, as a team writes one with the core
// http module: each POST is piped to the upstream (--upstream HOST:PORT) with the client's
// headers (x-request-id and traceparent among them), and the upstream's answer piped back with
// its status and headers. GET /readyz answers on its own (a liveness check). It binds --port.
//
// --incident picks the one thing wrong with it (healthy: nothing):
//   buffer        the upstream's whole answer is collected, then sent with a content-length
//                 (a response transform that needs the whole body: moderation, usage count);
//   read_timeout  the upstream socket's idle timeout is --timeout-ms: after that silence the
//                 gateway gives up on the upstream, answers 504 when no head was sent yet and
//                 destroys the client's response otherwise;
//   no_cancel     a client that goes away is not passed on: the upstream request stays open
//                 and the model generates for nobody.
const http = require("http");

const option = (name, fallback) =>
  process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : fallback;
const port = Number(option("--port", "0"));
const [upstreamHost, upstreamPort] = option("--upstream", "").split(":");
const incident = option("--incident", "healthy");
const timeoutMs = Number(option("--timeout-ms", "60000"));

const HOP_BY_HOP = ["connection", "keep-alive", "transfer-encoding", "host"];

function forward(req, res) {
  const headers = { ...req.headers };
  for (const name of HOP_BY_HOP) delete headers[name];
  const upstream = http.request({
    host: upstreamHost,
    port: Number(upstreamPort),
    method: req.method,
    path: req.url,
    headers,
  });
  if (incident === "read_timeout") {
    upstream.setTimeout(timeoutMs, () => upstream.destroy(new Error("upstream idle timeout")));
  }
  upstream.on("error", (err) => {
    console.warn(`upstream ${req.url}: ${err.message}`);
    if (!res.headersSent) {
      res.writeHead(incident === "read_timeout" ? 504 : 502, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "upstream unavailable" } }));
    } else {
      res.destroy();
    }
  });
  upstream.on("response", (answer) => {
    answer.on("error", () => res.destroy());
    if (incident === "buffer") {
      const parts = [];
      answer.on("data", (part) => parts.push(part));
      answer.on("end", () => {
        const body = Buffer.concat(parts);
        res.writeHead(answer.statusCode, {
          "content-type": answer.headers["content-type"] ?? "text/event-stream",
          "content-length": body.length,
        });
        res.end(body);
      });
      return;
    }
    const out = { ...answer.headers };
    for (const name of HOP_BY_HOP) delete out[name];
    res.writeHead(answer.statusCode, out);
    answer.pipe(res);
  });
  if (incident !== "no_cancel") {
    res.on("close", () => {
      if (!res.writableFinished) upstream.destroy();
    });
  }
  req.pipe(upstream);
}

const server = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/readyz") {
    res.end("ok");
    return;
  }
  forward(req, res);
});

server.listen(port, "127.0.0.1", () => {
  console.log("gateway listening on http://127.0.0.1:" + server.address().port);
});
