package rootfs

import (
	"bytes"
	"encoding/binary"
	"os"
)

// ldCacheMagic opens glibc's ld.so.cache in the format ldconfig has written
// alone since glibc 2.32 (Debian 12): a 48-byte header, then 24-byte
// entries whose key (soname) and value (path) are offsets of NUL-terminated
// strings from the start of the file.
const ldCacheMagic = "glibc-ld.so.cache1.1"

// readLDCache reads the root's own /etc/ld.so.cache (not the host's: the
// jail binds the root's /etc). A missing or unknown-format cache yields
// nil, and the default directories are searched, as ld.so does.
func readLDCache(root string) map[string][]string {
	_, hp, err := resolveIn(root, "/etc/ld.so.cache")
	if err != nil {
		return nil
	}
	data, err := os.ReadFile(hp)
	if err != nil {
		return nil
	}
	return parseLDCache(data)
}

func parseLDCache(data []byte) map[string][]string {
	const header, entrySize = 48, 24
	if len(data) < header || !bytes.HasPrefix(data, []byte(ldCacheMagic)) {
		return nil
	}
	le := binary.LittleEndian // ldconfig writes host byte order; all our targets are little-endian
	n := le.Uint32(data[20:])
	if uint64(n)*entrySize > uint64(len(data)-header) {
		return nil
	}
	str := func(off uint32) (string, bool) {
		if uint64(off) >= uint64(len(data)) {
			return "", false
		}
		end := bytes.IndexByte(data[off:], 0)
		if end < 0 {
			return "", false
		}
		return string(data[off : int(off)+end]), true
	}
	cache := make(map[string][]string)
	for i := range n {
		e := data[header+int(i)*entrySize:]
		key, ok1 := str(le.Uint32(e[4:]))
		val, ok2 := str(le.Uint32(e[8:]))
		if ok1 && ok2 {
			cache[key] = append(cache[key], val)
		}
	}
	return cache
}
