package image

import (
	"bufio"
	"bytes"
	"net/url"
	"os"
	"slices"
	"strings"
)

// FallbackMirror is the mirror Build uses when the host's apt names none.
const FallbackMirror = "http://deb.debian.org/debian"

// hostSources are where the host's apt says its mirror is, deb822 first.
var hostSources = []string{"/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"}

// HostMirror returns the mirror this host's apt uses for suite: the first
// URI of a "deb" source for that suite with the main component, from
// /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list, or
// FallbackMirror. Build defaults to it because a build machine's network
// often reaches only the mirror (or proxy, or snapshot) apt is set up for.
func HostMirror(suite string) string {
	for _, p := range hostSources {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var m string
		if strings.HasSuffix(p, ".sources") {
			m = mirrorFromDeb822(data, suite)
		} else {
			m = mirrorFromList(data, suite)
		}
		if m != "" {
			return m
		}
	}
	return FallbackMirror
}

// mirrorFromDeb822 reads the deb822 format of sources(5): stanzas of
// "Field: value" lines separated by blank lines.
func mirrorFromDeb822(data []byte, suite string) string {
	for _, stanza := range bytes.Split(data, []byte("\n\n")) {
		fields := map[string][]string{}
		sc := bufio.NewScanner(bytes.NewReader(stanza))
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if ok && !strings.HasPrefix(line, " ") {
				fields[strings.ToLower(strings.TrimSpace(k))] = strings.Fields(v)
			}
		}
		if fields["enabled"] != nil && slices.Contains(fields["enabled"], "no") {
			continue
		}
		if slices.Contains(fields["types"], "deb") && slices.Contains(fields["suites"], suite) &&
			slices.Contains(fields["components"], "main") {
			for _, u := range fields["uris"] {
				if validMirror(u) {
					return u
				}
			}
		}
	}
	return ""
}

// mirrorFromList reads the one-line format: deb [options] URI SUITE COMPONENT...
func mirrorFromList(data []byte, suite string) string {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") {
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) == 0 {
				continue
			}
			f = f[1:]
		}
		if len(f) >= 3 && f[1] == suite && slices.Contains(f[2:], "main") && validMirror(f[0]) {
			return f[0]
		}
	}
	return ""
}

func validMirror(u string) bool {
	p, err := url.Parse(u)
	return err == nil && (p.Scheme == "http" || p.Scheme == "https" || p.Scheme == "file") && (p.Host != "" || p.Scheme == "file")
}
