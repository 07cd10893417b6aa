// The official MCP TypeScript SDK's client against stockade gateway's
// POST /v1/mcp: Streamable HTTP over HTTPS with a tenant's bearer token,
// the gateway's certificate trusted through NODE_EXTRA_CA_CERTS. The same
// checks as against stockade mcp (suite.mjs), then what only a gateway
// does: no token is refused, and a tenant's caps hold on the tool's run.
// Then over stdio, `stockade mcp --server https://HOST:PORT` the client
// starts, with the token in $STOCKADE_TOKEN and the CA of --ca-file.
//   MCP_URL=https://HOST:PORT/v1/mcp MCP_TOKEN=... MCP_TOKEN_CAPPED=... MCP_CAPPED_MEMORY=BYTES \
//     STOCKADE_BIN=bin/stockade NODE_EXTRA_CA_CERTS=ca.crt node tests/mcp-sdk/gateway.mjs
// gateway/e2e_linux_test.go (TestGatewayMCPSDKClient) starts the gateway,
// its cluster and this script.
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { check, connect, passed, suite } from "./suite.mjs";

const { MCP_URL: url, MCP_TOKEN: token, MCP_TOKEN_CAPPED: capped, MCP_CAPPED_MEMORY: cappedMemory, STOCKADE_BIN: bin,
  NODE_EXTRA_CA_CERTS: caFile } = process.env;
if (!url || !token || !capped || !cappedMemory || !bin || !caFile) {
  console.error("mcp-sdk: needs MCP_URL, MCP_TOKEN, MCP_TOKEN_CAPPED, MCP_CAPPED_MEMORY, STOCKADE_BIN and NODE_EXTRA_CA_CERTS (TestGatewayMCPSDKClient sets them)");
  process.exit(2);
}
const bearer = (t) => new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${t}` } } });

let client = await connect(bearer(token));
await suite("gateway", client);
await client.close();

// No token: the gateway answers 401 before the MCP server sees a byte.
let refused;
try {
  await connect(new StreamableHTTPClientTransport(new URL(url)));
} catch (e) {
  refused = e;
}
check("gateway: no token is refused (401)", refused !== undefined && refused.code === 401 && String(refused).includes("bearer token"), String(refused));

// A tenant with a memory cap: a tool's run gets the cap, as a request the
// tenant sends itself does.
client = await connect(bearer(capped));
const r = await client.callTool({ name: "run_python", arguments: { code: "print(6*7)" } });
check("gateway: a capped tenant's run_python runs with its cap", !r.isError && r.structuredContent.verdict === "ok" &&
  r.structuredContent.limits.memory_bytes === Number(cappedMemory), r);
await client.close();

// stdio: stockade mcp as the host starts it, a client of the gateway.
client = await connect(new StdioClientTransport({
  command: bin, args: ["mcp", "--server", new URL(url).origin, "--ca-file", caFile],
  env: { ...process.env, STOCKADE_TOKEN: token }, stderr: "inherit",
}));
await suite("stdio via the gateway", client);
await client.close();

console.log(`mcp-sdk: ${passed} passed, 0 failed (node ${process.version}, through the gateway)`);
