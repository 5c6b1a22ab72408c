// A Node.js gateway as a team outside Python writes one: node:http, an OpenAI-style SSE route,
// a ready path and a listening line of its own. It binds the PORT the plugin sets, or with
// --port-zero a free port that only its listening line tells; --host HOST listens there.
const http = require("http");

const option = (name) =>
  process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : undefined;
const host = option("--host") ?? "127.0.0.1";
const port = process.argv.includes("--port-zero") ? 0 : Number(process.env.PORT);

const server = http.createServer((req, res) => {
  if (req.url === "/readyz") {
    res.end("ok");
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream" });
  for (const word of ["hello", " from", " node"]) {
    const chunk = { choices: [{ index: 0, delta: { content: word }, finish_reason: null }] };
    res.write("data: " + JSON.stringify(chunk) + "\n\n");
  }
  res.write('data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n');
  res.end("data: [DONE]\n\n");
});

server.listen(port, host, () => {
  console.log("gateway listening on http://" + host + ":" + server.address().port);
});
