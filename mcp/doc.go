// Package mcp is stockade's Model Context Protocol server: the tools a
// model calls to run Python in a jail (run_python, create_session,
// close_session, upload_file, download_file, list_files), built on the
// official Go SDK.
//
// The tools know nothing of jails: they call a Backend, stockade serve's
// operations with package api's types in and out. `stockade mcp` gives it
// a server's unix socket, or a private one of a server it runs itself,
// through the Go client (cmd/stockade); the server's own POST /v1/mcp gives it
// the server's operations, called in process with the caller's identity.
// So one set of tools, one set of checks, behind stdio and Streamable HTTP
// alike. Each tool's structured content is a typed value (output.go), so
// the SDK publishes its schema and checks every answer against it.
//
// The jail's profile, limits and network allowlist are never a tool's
// argument: they come from the command line that started the server or
// `stockade mcp` (Options.Profile and Limits), and every tool's input
// schema refuses properties it does not name, so a model cannot loosen its
// own jail by asking.
package mcp
