package netproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// maxHello bounds the ClientHello the proxy buffers before it forwards
// anything (post-quantum key shares make them a few KiB; 64 KiB is the
// handshake length a record layer of 2^14-byte fragments can reasonably
// carry here).
const maxHello = 64 << 10

// errNotTLS is a tunnel whose first bytes are not a TLS handshake.
var errNotTLS = errors.New("the tunnel does not start with a TLS ClientHello (CONNECT tunnels carry TLS only)")

// clientHello is what the proxy learns from the first flight of a tunnel.
type clientHello struct {
	raw        []byte // every byte read, to forward unchanged
	serverName string // the SNI host_name, "" if none
	hasSNI     bool
}

// readClientHello reads TLS records from r until it holds one whole
// ClientHello handshake message (which may span records) and returns the
// SNI it names. Nothing is forwarded before the name has been checked.
func readClientHello(r io.Reader) (*clientHello, error) {
	h := &clientHello{}
	var hs []byte // handshake bytes reassembled from records
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if len(h.raw) == 0 && errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("read TLS record: %w", err)
		}
		h.raw = append(h.raw, hdr[:]...)
		// 22 is handshake; the major version of every TLS record is 3.
		if hdr[0] != 22 || hdr[1] != 3 {
			return nil, errNotTLS
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		if n == 0 || n > 1<<14+2048 || len(h.raw)+n > maxHello {
			return nil, errors.New("TLS record too large for a ClientHello")
		}
		start := len(h.raw)
		h.raw = append(h.raw, make([]byte, n)...)
		if _, err := io.ReadFull(r, h.raw[start:]); err != nil {
			return nil, fmt.Errorf("read TLS record: %w", err)
		}
		hs = append(hs, h.raw[start:]...)
		if len(hs) < 4 {
			continue
		}
		if hs[0] != 1 { // client_hello
			return nil, errNotTLS
		}
		msgLen := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		if msgLen > maxHello {
			return nil, errors.New("ClientHello too large")
		}
		if len(hs) < 4+msgLen {
			continue
		}
		name, has, err := parseSNI(hs[4 : 4+msgLen])
		if err != nil {
			return nil, err
		}
		h.serverName, h.hasSNI = name, has
		return h, nil
	}
}

// reader walks a byte string, failing once on any overrun.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() int {
	v := r.take(1)
	if v == nil {
		return 0
	}
	return int(v[0])
}

func (r *reader) u16() int {
	v := r.take(2)
	if v == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(v))
}

// parseSNI finds the server_name extension (RFC 6066) of a ClientHello
// body. More than one host_name, or a second server_name extension, is a
// malformed hello that could show the proxy one name and the server
// another; it is refused.
func parseSNI(body []byte) (string, bool, error) {
	malformed := errors.New("malformed TLS ClientHello")
	r := &reader{b: body}
	r.take(2)       // legacy_version
	r.take(32)      // random
	r.take(r.u8())  // legacy_session_id
	r.take(r.u16()) // cipher_suites
	r.take(r.u8())  // legacy_compression_methods
	if r.bad {
		return "", false, malformed
	}
	if len(r.b) == 0 {
		return "", false, nil // no extensions at all
	}
	exts := &reader{b: r.take(r.u16())}
	if r.bad {
		return "", false, malformed
	}
	name, found := "", false
	for len(exts.b) > 0 {
		typ := exts.u16()
		data := exts.take(exts.u16())
		if exts.bad {
			return "", false, malformed
		}
		if typ != 0 {
			continue
		}
		if found {
			return "", false, errors.New("TLS ClientHello with two server_name extensions")
		}
		list := &reader{b: data}
		names := &reader{b: list.take(list.u16())}
		if list.bad || len(list.b) != 0 {
			return "", false, malformed
		}
		for len(names.b) > 0 {
			kind := names.u8()
			host := names.take(names.u16())
			if names.bad {
				return "", false, malformed
			}
			if kind != 0 {
				continue
			}
			if found {
				return "", false, errors.New("TLS ClientHello naming two servers")
			}
			name, found = string(host), true
		}
		if !found {
			return "", false, malformed
		}
	}
	return name, found, nil
}
