// Package api holds the wire types of stockade's HTTP API (stockade serve):
// every route's request and answer, as JSON. It imports nothing of
// stockade's, so that every package — the server, its Go client, the MCP
// tools, a gateway — can speak the same types.
package api
