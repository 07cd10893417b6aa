package server

import (
	"context"
	"encoding/base64"
	"path"
	"strings"
	"time"

	"github.com/stockade/stockade/jail"
)

// fontlistCode makes matplotlib scan the fonts once and copies its font
// list to /work, where the server reads it like any run's files.
const fontlistCode = `import glob, os, shutil
import matplotlib.font_manager
for f in glob.glob(os.path.join(os.environ.get("MPLCONFIGDIR", "/tmp/.matplotlib"), "fontlist-*.json")):
    shutil.copy(f, "/work/")
`

// buildFontlist runs matplotlib's font scan once, in a jail of the first
// profile with a fresh /work, and keeps the list for every later jail's
// preamble: without it each run that plots scans every font on the host
// again (seconds). The list is the jail's output, so it is only ever handed
// back to jails. Without matplotlib there is nothing to keep.
func (s *Server) buildFontlist(ctx context.Context) {
	var spec jail.Spec
	found := false
	for _, p := range s.cfg.Profiles {
		if sp := s.profiles[p.Name]; sp.WorkdirMode == jail.WorkdirFresh && sp.Workdir == "" {
			spec, found = sp, true
			break
		}
	}
	if !found {
		return
	}
	jl, err := prepareJail(ctx, spec, s.cfg.Notices, s.preamble())
	if err != nil {
		if ctx.Err() == nil {
			s.logf("matplotlib font list: %v", err)
		}
		return
	}
	defer jl.close(newBudget(0, 0))
	hdr, err := encodeJob(job{Code: &[]string{fontlistCode}[0]})
	if err != nil {
		return
	}
	go func() { jl.stdin.Write(hdr); jl.stdin.Close() }()
	begin := time.Now()
	res, err := jl.p.Start(ctx, jail.StartOptions{})
	if err != nil || res.Verdict != jail.VerdictOK {
		if ctx.Err() == nil && !strings.Contains(res.Stderr, "No module named 'matplotlib'") {
			s.logf("matplotlib font list: verdict %s: %.300s", res.Verdict, res.Stderr)
		}
		return
	}
	c, err := collectWork(jl.p.Workdir(), nil, collectLimits{MaxBytes: 16 << 20, MaxFiles: 4, MaxDepth: 0})
	if err != nil {
		return
	}
	for name, data := range c.files {
		if ok, _ := path.Match("fontlist-*.json", name); ok {
			b, err := base64.StdEncoding.DecodeString(data)
			if err == nil {
				s.fontlist.Store(&namedFile{Name: name, Data: b})
				s.logf("matplotlib font list cached for every jail (%d bytes, built in %v)", len(b), time.Since(begin).Round(time.Millisecond))
			}
		}
	}
}

// preamble is the frame each new jail gets before its job.
func (s *Server) preamble() []byte {
	b, _ := frame(preamble{MplFontlist: s.fontlist.Load()})
	return b
}
