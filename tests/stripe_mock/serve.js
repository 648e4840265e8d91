// serve.js - stripe-stateful-mock (npm, pinned in package.json) on
// 127.0.0.1:PORT only (its own start-up script listens on every address).
// Prints "stripe-stateful-mock: listening on 127.0.0.1:PORT" to stderr when
// ready; SIGTERM closes it (exit 0).
//
//   node serve.js PORT
"use strict";
const http = require("http");
const log = require("loglevel");
log.setLevel(process.env.LOG_LEVEL || "warn");
const mock = require("stripe-stateful-mock");

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port < 1 || port > 65535) {
	console.error("usage: node serve.js PORT");
	process.exit(2);
}
const server = http.createServer(mock.createExpressApp());
server.listen(port, "127.0.0.1", () => {
	console.error(`stripe-stateful-mock: listening on 127.0.0.1:${port}`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
