package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/stockade/stockade/api"
)

// A run's lines and its end go from the node that claimed it to the
// gateway waiting for it by core NATS on RunSubject(node, id): the
// gateway subscribes (to every node's subject of the run) before it
// publishes the run, and NATS permissions let a node publish only under
// its own name, so the subject a line came on says which node sent it.
// NATS keeps one publisher's messages to one subject in order and drops
// what a slow subscriber cannot hold (its pending limits): each message
// carries its sequence number, and a gap is seen.
//
// The messages: sequence 1.. in the header SeqHeader; a streamed run's
// first message is empty (the stream begins: the server sent its status
// and headers), each later one is one NDJSON line as the node's server
// wrote it, the last line being the result. Once the run's answer is
// stored in stockade_results, the node publishes a message with
// DoneHeader: the gateway reads the answer from the bucket then, instead
// of waiting for its next look.

// RunSubject is where node publishes run id's lines and its end.
func RunSubject(node, id string) string { return "stockade.run." + node + "." + id }

// The headers of a run's messages.
const (
	SeqHeader  = "Stockade-Seq"
	DoneHeader = "Stockade-Done"
)

// maxStreamLines bounds the lines of one streamed run a gateway forwards;
// past it (a node gone wrong: the server's --output-limit keeps a run's
// output far below) the rest is not forwarded and the stream ends with the
// stored result.
const maxStreamLines = 1 << 16

// maxLine is the longest line of a run's stream a gateway takes: no line
// is longer than the stored result that holds its text.
func (c Config) maxLine() int { return int(c.MaxResult) + 4096 }

// maxStreamBytes bounds the bytes of one run's stream a gateway holds
// unread (its subscription's pending limit) and forwards: the output
// lines hold no more than the result does, and the result line once more.
func (c Config) maxStreamBytes() int { return 2*c.maxLine() + 1<<20 }

// streamOut is the node's side of a streamed run: the server's
// ResponseWriter. Once the server answers 200 as NDJSON, each line it
// writes is published as it is flushed; the last line, the result, is
// also kept as the run's stored answer. Any other answer (a refusal
// before the stream began) is recorded whole, as an unstreamed run's is.
type streamOut struct {
	rec     *recorder
	nc      *nats.Conn
	subject string
	max     int

	seq     int
	begun   bool
	pending []byte
	result  []byte // the result line, without its newline
	over    bool   // a line over max: not published, the stream is cut
}

func (s *streamOut) Header() http.Header { return s.rec.Header() }

func (s *streamOut) WriteHeader(code int) { s.rec.WriteHeader(code) }

func (s *streamOut) streaming() bool {
	return s.rec.Status() == http.StatusOK && s.rec.Header().Get("Content-Type") == api.NDJSON
}

func (s *streamOut) Write(p []byte) (int, error) {
	s.rec.WriteHeader(s.rec.Status()) // the first status written wins: a body alone is a 200
	if !s.streaming() {
		return s.rec.Write(p)
	}
	s.pending = append(s.pending, p...)
	return len(p), nil
}

// SetWriteDeadline: the server bounds each line's write; a publish never
// waits (NATS buffers it), so there is nothing to bound.
func (s *streamOut) SetWriteDeadline(time.Time) error { return nil }

// FlushError publishes what the server flushed: the stream's beginning,
// then each whole line.
func (s *streamOut) FlushError() error {
	if !s.streaming() {
		return nil
	}
	if !s.begun {
		s.begun = true
		s.publish(nil)
	}
	for {
		i := bytes.IndexByte(s.pending, '\n')
		if i < 0 {
			return nil
		}
		line := s.pending[:i+1]
		s.pending = s.pending[i+1:]
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(line, &l) == nil && l.Type == api.StreamResult && len(line) <= s.max {
			s.result = append([]byte(nil), line[:len(line)-1]...)
		}
		if len(line) > s.max || s.over {
			// Not sent: the gateway sees the gap and ends the stream
			// with the stored result.
			s.over = true
			s.seq++
			continue
		}
		s.publish(line)
	}
}

func (s *streamOut) publish(data []byte) {
	s.seq++
	m := nats.NewMsg(s.subject)
	m.Header.Set(SeqHeader, strconv.Itoa(s.seq))
	m.Data = data
	// A line that cannot be sent (NATS away, its buffer full) is a gap
	// the gateway sees; the run goes on.
	_ = s.nc.PublishMsg(m)
}

// answer is the run's answer to store: the result line, its type
// dropped, for a stream; else what was recorded.
func (s *streamOut) answer() reply {
	if !s.begun {
		return s.rec.answer()
	}
	if s.result == nil {
		return reply{Status: 502, Header: map[string]string{"Content-Type": "application/json"},
			Body: errorBody("the run's stream ended without a result line (or one larger than the cluster's max_result)", nil)}
	}
	var m map[string]json.RawMessage
	body := s.result
	if json.Unmarshal(body, &m) == nil {
		delete(m, "type")
		body = mustJSON(m)
	}
	return reply{Status: 200, Header: map[string]string{"Content-Type": "application/json"}, Body: body}
}

// done says the run's answer is stored (or could not be).
func (s *streamOut) done() {
	s.seq++
	m := nats.NewMsg(s.subject)
	m.Header.Set(SeqHeader, strconv.Itoa(s.seq))
	m.Header.Set(DoneHeader, "1")
	_ = s.nc.PublishMsg(m)
}

// lineGrace is how long a gateway that found a streamed run's result
// stored waits for the lines still on their way (until the node's done).
const lineGrace = 2 * time.Second

// lineWriteTimeout bounds one line's write to the caller: one that does
// not read is let go (its run goes on, its result fetchable).
const lineWriteTimeout = 30 * time.Second

// runStream is a gateway's side of one run's subject: it verifies what
// the node sends (the claimer's subject, in sequence, bounded, each line
// one JSON line of the stream's shape) and forwards a streamed run's
// lines to the caller; the first wrong message breaks the stream, whose
// last line then comes from the stored result (or host_lost).
type runStream struct {
	g          *Backend
	sub        *nats.Subscription
	w          http.ResponseWriter
	rc         *http.ResponseController
	tenant, id string
	stream     bool // the caller asked for NDJSON

	node   string // the claimer, once a message came
	claim  *claim // its claim, read then
	next   int    // the sequence number due
	lines  int
	bytes  int
	begun  bool // the 200 and its headers went out
	broken bool // a gap or a wrong line: no more lines are forwarded
}

type taken int

const (
	takeMore  taken = iota
	takeDone        // the node stored the result
	takeFinal       // the result line went out: the answer is over
	takeGone        // the caller is gone
)

// take handles one message of the run's subject.
func (s *runStream) take(m *nats.Msg) taken {
	if !s.fromClaimer(m.Subject) {
		return takeMore // not the claimer's: dropped
	}
	if m.Header.Get(DoneHeader) != "" {
		return takeDone
	}
	if !s.stream || s.broken {
		return takeMore
	}
	if seq, err := strconv.Atoi(m.Header.Get(SeqHeader)); err != nil || seq != s.next {
		s.broken = true // a gap (NATS dropped lines, or the node did)
		return takeMore
	}
	s.next++
	if len(m.Data) == 0 {
		if s.begun {
			s.broken = true
			return takeMore
		}
		s.begun = true
		s.w.Header().Set("Content-Type", api.NDJSON)
		s.w.WriteHeader(http.StatusOK)
		return s.send(nil)
	}
	line, typ, ok := s.verify(m.Data)
	if !ok {
		s.broken = true
		return takeMore
	}
	if typ != api.StreamResult {
		return s.send(line)
	}
	if t := s.finish(withRunID(line, s.id, s.node)); t == takeGone {
		return t
	}
	return takeFinal
}

// fromClaimer says whether a message's subject names the run's claimer
// (read from the claims bucket once): NATS lets a node publish only under
// its own name.
func (s *runStream) fromClaimer(subject string) bool {
	prefix, suffix := "stockade.run.", "."+s.id
	if len(subject) <= len(prefix)+len(suffix) || subject[:len(prefix)] != prefix || subject[len(subject)-len(suffix):] != suffix {
		return false
	}
	node := subject[len(prefix) : len(subject)-len(suffix)]
	if s.node == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e, err := s.g.b.claims.Get(ctx, s.id)
		var c claim
		if err != nil || json.Unmarshal(e.Value(), &c) != nil || c.Tenant != s.tenant {
			return false
		}
		s.node, s.claim = c.Node, &c
	}
	return node == s.node
}

// verify checks one line of a stream: within the bounds, one line, a
// JSON object of a known type (an output line exactly {type, data}).
func (s *runStream) verify(data []byte) ([]byte, string, bool) {
	max := s.g.cfg.maxLine()
	if len(data) > max || s.lines >= maxStreamLines || s.bytes+len(data) > s.g.cfg.maxStreamBytes() ||
		bytes.IndexByte(data, '\n') != len(data)-1 {
		return nil, "", false
	}
	s.lines++
	s.bytes += len(data)
	var head struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &head) != nil {
		return nil, "", false
	}
	switch head.Type {
	case api.StreamResult:
		var probe map[string]json.RawMessage
		if json.Unmarshal(data, &probe) != nil {
			return nil, "", false
		}
	case api.StreamStdout, api.StreamStderr:
		var l api.StreamLine
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if dec.Decode(&l) != nil {
			return nil, "", false
		}
	default:
		return nil, "", false
	}
	return data, head.Type, true
}

// send writes one line (nil: the headers alone) to the caller and
// flushes it, within lineWriteTimeout.
func (s *runStream) send(line []byte) taken {
	_ = s.rc.SetWriteDeadline(time.Now().Add(lineWriteTimeout))
	if line != nil {
		if _, err := s.w.Write(line); err != nil {
			return takeGone
		}
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return takeGone
	}
	return takeMore
}

// finish writes the stream's last line, once.
func (s *runStream) finish(line []byte) taken {
	s.broken = true // nothing after it
	return s.send(line)
}

// withRunID adds the cluster's run id and node to a result line (new
// fields, as an unstreamed answer has them), its bytes otherwise as the
// node's server wrote them.
func withRunID(line []byte, id, node string) []byte {
	var probe struct {
		RunID *json.RawMessage `json:"run_id"`
		Node  *json.RawMessage `json:"node"`
	}
	json.Unmarshal(line, &probe)
	body := bytes.TrimRight(line, "\n")
	end := bytes.LastIndexByte(body, '}')
	if end < 0 {
		return line
	}
	var add []byte
	if probe.RunID == nil {
		add = fmt.Appendf(add, `,"run_id":%s`, mustJSON(id))
	}
	if probe.Node == nil && node != "" {
		add = fmt.Appendf(add, `,"node":%s`, mustJSON(node))
	}
	out := append(append(append([]byte(nil), body[:end]...), add...), body[end:]...)
	return append(out, '\n')
}

// resultLine makes an answer's JSON object a stream's last line.
func resultLine(body []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || m == nil {
		m = map[string]json.RawMessage{"error": mustJSON(string(body))}
	}
	delete(m, "type")
	rest := mustJSON(m)[1:] // its "{" goes: "type" comes first, as the server writes it
	if len(rest) > 1 {
		rest = append([]byte(","), rest...)
	}
	return append(append([]byte(`{"type":"result"`), rest...), '\n')
}

// storedLine is the last line of a stream made from its stored result.
func storedLine(id string, res *result) []byte {
	return resultLine(resultBody(id, res))
}
