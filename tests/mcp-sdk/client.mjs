// The official MCP TypeScript SDK's client (npm @modelcontextprotocol/sdk,
// pinned in package-lock.json) drives stockade mcp as an agent's host would:
// one connection, many calls, over stdio and over Streamable HTTP.
//   STOCKADE_BIN=... STOCKADE_SOCKET=... MCP_URL=... node tests/mcp-sdk/client.mjs
// tests/mcp-sdk/run starts the server and the HTTP front end it names.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const bin = process.env.STOCKADE_BIN;
const sock = process.env.STOCKADE_SOCKET;
const url = process.env.MCP_URL;
if (!bin || !sock || !url) {
  console.error("mcp-sdk: needs STOCKADE_BIN, STOCKADE_SOCKET and MCP_URL (tests/mcp-sdk/run sets them)");
  process.exit(2);
}

let passed = 0;
function check(name, ok, got) {
  if (!ok) {
    console.error(`mcp-sdk: FAIL ${name}; got:\n${JSON.stringify(got, null, 1).slice(0, 3000)}`);
    process.exit(1);
  }
  console.log(`mcp-sdk: ok   ${name}`);
  passed++;
}
const text = (r) => (r.content || []).map((c) => c.text || "").join("");
const tools = ["close_session", "create_session", "download_file", "interrupt", "list_files", "run_python", "upload_file"];

async function connect(transport) {
  const client = new Client({ name: "stockade-mcp-sdk-test", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

// The calls every transport must answer alike: the tool list, a run, and
// a session whose state lasts from one call to the next until closed.
async function suite(label, client) {
  const list = await client.listTools();
  check(`${label}: tools/list`,
    JSON.stringify(list.tools.map((t) => t.name).sort()) === JSON.stringify(tools) &&
      list.tools.every((t) => t.inputSchema.additionalProperties === false), list);

  let r = await client.callTool({ name: "run_python", arguments: { code: "print(6*7)" } });
  check(`${label}: run_python`, !r.isError && text(r).includes("42") && r.structuredContent.verdict === "ok", r);

  r = await client.callTool({ name: "run_python", arguments: { code: "print(1)", memory: "64G" } });
  check(`${label}: a limit in the arguments is refused`, r.isError === true && text(r).includes("additional properties"), r);

  r = await client.callTool({ name: "create_session", arguments: {} });
  const sid = r.structuredContent && r.structuredContent.session_id;
  check(`${label}: create_session`, !r.isError && typeof sid === "string" && sid.length >= 16, r);
  r = await client.callTool({ name: "run_python", arguments: { session_id: sid, code: "x = 20" } });
  check(`${label}: exec in the session`, !r.isError && r.structuredContent.state === "kept", r);
  r = await client.callTool({ name: "run_python", arguments: { session_id: sid, code: "x + 22" } });
  check(`${label}: the session keeps its state`, !r.isError && r.structuredContent.result === "42", r);
  r = await client.callTool({ name: "close_session", arguments: { session_id: sid } });
  check(`${label}: close_session`, !r.isError && r.structuredContent.verdict === "closed", r);
  r = await client.callTool({ name: "run_python", arguments: { session_id: sid, code: "x" } });
  check(`${label}: a closed session is gone`, r.isError === true, r);
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
