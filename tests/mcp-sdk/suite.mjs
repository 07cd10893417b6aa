// The checks every client of stockade's MCP tools runs alike (client.mjs
// against stockade mcp, gateway.mjs against stockade gateway's /v1/mcp).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";

export let passed = 0;
export function check(name, ok, got) {
  if (!ok) {
    console.error(`mcp-sdk: FAIL ${name}; got:\n${JSON.stringify(got, null, 1).slice(0, 3000)}`);
    process.exit(1);
  }
  console.log(`mcp-sdk: ok   ${name}`);
  passed++;
}
export const text = (r) => (r.content || []).map((c) => c.text || "").join("");
const tools = ["close_session", "create_session", "download_file", "interrupt", "list_files", "run_python", "upload_file"];

export async function connect(transport) {
  const client = new Client({ name: "stockade-mcp-sdk-test", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

// The calls every transport must answer alike: the tool list, a run, and
// a session whose state lasts from one call to the next until closed.
export async function suite(label, client) {
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
