package server

import (
	"strings"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/netproxy"
)

// maxNotices bounds the network lines added to one run's or exec's
// stderr; one more counts the rest (the network list has them all).
const maxNotices = 8

// withNetworkNotices is stderr with the lines `stockade run` prints on its
// own stderr for a run's refused network attempts ("stockade: network:
// this jail has no network (name lookup via 127.0.0.1:53 refused); see
// --allow-net"), each after the program's own output on a line of its
// own. A model reads a run's text: what it gets of a refusal otherwise is
// Python's "Temporary failure in name resolution", the reason being only
// in the network list many hosts never show it. The lines are stockade's,
// marked so, never dressed as the program's; stderr_bytes still counts
// the program's bytes alone. A streamed answer gets them as a stderr line
// before its result.
func withNetworkNotices(stderr string, network []jail.NetworkDecision, noNetwork bool, out *ndjson) string {
	lines := netproxy.Notices(network, noNetwork, maxNotices)
	if len(lines) == 0 {
		return stderr
	}
	add := strings.Join(lines, "\n") + "\n"
	if stderr != "" && !strings.HasSuffix(stderr, "\n") {
		add = "\n" + add
	}
	if out != nil {
		w := out.stream(api.StreamStderr)
		_, _ = w.Write([]byte(add))
		w.flush()
	}
	return stderr + add
}
