// The official MCP TypeScript SDK's client (npm @modelcontextprotocol/sdk,
// pinned in package-lock.json) drives stockade mcp as an agent's host would:
// one connection, many calls, over stdio and over Streamable HTTP.
//   STOCKADE_BIN=... STOCKADE_SOCKET=... MCP_URL=... node tests/mcp-sdk/client.mjs
// tests/mcp-sdk/run starts the server and the HTTP front end it names.
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { check, connect, passed, suite, text } from "./suite.mjs";

const bin = process.env.STOCKADE_BIN;
const sock = process.env.STOCKADE_SOCKET;
const url = process.env.MCP_URL;
if (!bin || !sock || !url) {
  console.error("mcp-sdk: needs STOCKADE_BIN, STOCKADE_SOCKET and MCP_URL (tests/mcp-sdk/run sets them)");
  process.exit(2);
}

// stdio, a pool of its own: the limits are the command line's.
let client = await connect(new StdioClientTransport({ command: bin, args: ["mcp", "--pool", "0", "--memory", "100M"], stderr: "inherit" }));
let r = await client.callTool({ name: "run_python", arguments: { code: "print(6*7)" } });
check("stdio, own pool: run_python with the command line's memory", !r.isError && text(r).includes("42") &&
  r.structuredContent.limits.memory_bytes === 100 * 1024 * 1024, r);
await client.close();

// stdio through a running stockade serve, the socket in the environment
// (as a host's "env" gives it).
client = await connect(new StdioClientTransport({
  command: bin, args: ["mcp"], env: { ...process.env, STOCKADE_SOCKET: sock }, stderr: "inherit",
}));
await suite("stdio via server", client);
await client.close();

// Streamable HTTP (stockade mcp --http, through the same server).
client = await connect(new StreamableHTTPClientTransport(new URL(url)));
await suite("http", client);
await client.close();

console.log(`mcp-sdk: ${passed} passed, 0 failed (node ${process.version})`);
