// Package httpbuf is an HTTP answer kept in memory, bounded: the
// http.ResponseWriter a handler is given when its answer goes somewhere
// other than a connection (a cluster node's stored result, the gateway's
// own questions to its backend and its MCP tools' calls). Past its bound
// the body is dropped and Over says so; the handler is never told, so it
// finishes as it would on a connection and never half-writes its work.
package httpbuf
