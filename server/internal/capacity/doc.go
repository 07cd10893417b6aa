// Package capacity is what stockade serve can hold at once, apart from
// HTTP: the prepared jails each profile's pool keeps (Pool), the memory
// and pids every live jail holds together (Budget), the requests admitted,
// queued and running (Gate), and the one per-uid counter (Quota) behind
// the caps on requests, connections and sessions per caller.
package capacity
