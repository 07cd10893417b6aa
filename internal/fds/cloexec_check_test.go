package fds

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// exemptMark, on a call's line or the line above, followed by a reason,
// exempts a call from the check: a descriptor meant for a child, or one
// the kernel makes close-on-exec without a flag.
const exemptMark = "//stockade:no-cloexec"

// fdRule says how a call that makes a descriptor asks for close-on-exec.
type fdRule struct {
	flagArg int      // the argument that must carry the flag
	flags   []string // the flag's names; one must be in that argument
	never   string   // when set: the call has no such flag; what to use instead
	// ifArg, when >= 0, makes the rule apply only when that argument is
	// not nil (recvmsg receives descriptors only with a control buffer).
	ifArg int
}

// flagAt asks for one of names in argument i. Each call has its own: the
// flags differ in value (MFD_CLOEXEC and FSOPEN_CLOEXEC are 1, which as an
// open flag is O_WRONLY, as FD_CLOEXEC is), so only the call's own counts.
func flagAt(i int, names ...string) fdRule { return fdRule{flagArg: i, flags: names, ifArg: -1} }

func never(instead string) fdRule { return fdRule{never: instead, ifArg: -1} }

// fdCalls are the calls of golang.org/x/sys/unix and syscall that make a
// descriptor, by name. pidfd_open and pidfd_getfd are missing on purpose:
// the kernel makes their descriptors close-on-exec always.
var fdCalls = map[string]fdRule{
	"Open":           flagAt(1, "O_CLOEXEC"),
	"Openat":         flagAt(2, "O_CLOEXEC"),
	"Openat2":        flagAt(2, "O_CLOEXEC"),
	"OpenByHandleAt": flagAt(2, "O_CLOEXEC"),
	"Dup3":           flagAt(2, "O_CLOEXEC"),
	"Socket":         flagAt(1, "SOCK_CLOEXEC"),
	"Socketpair":     flagAt(1, "SOCK_CLOEXEC"),
	"Accept4":        flagAt(1, "SOCK_CLOEXEC"),
	"Pipe2":          flagAt(1, "O_CLOEXEC"),
	"MemfdCreate":    flagAt(1, "MFD_CLOEXEC"),
	"OpenTree":       flagAt(2, "OPEN_TREE_CLOEXEC", "O_CLOEXEC"),
	"Fsopen":         flagAt(1, "FSOPEN_CLOEXEC"),
	"Fsmount":        flagAt(1, "FSMOUNT_CLOEXEC"),
	"InotifyInit1":   flagAt(0, "IN_CLOEXEC", "O_CLOEXEC"),
	"EpollCreate1":   flagAt(0, "EPOLL_CLOEXEC", "O_CLOEXEC"),
	"Eventfd":        flagAt(1, "EFD_CLOEXEC"),
	"Signalfd":       flagAt(2, "SFD_CLOEXEC"),
	"TimerfdCreate":  flagAt(1, "TFD_CLOEXEC"),
	"FanotifyInit":   flagAt(0, "FAN_CLOEXEC"),
	"Fspick":         flagAt(2, "FSPICK_CLOEXEC"),
	"PerfEventOpen":  flagAt(4, "PERF_FLAG_FD_CLOEXEC"),
	"MemfdSecret":    flagAt(0, "O_CLOEXEC"),
	"Recvmsg":        {flagArg: 3, flags: []string{"MSG_CMSG_CLOEXEC"}, ifArg: 2},
	"RecvmsgBuffers": {flagArg: 3, flags: []string{"MSG_CMSG_CLOEXEC"}, ifArg: 2},
	"Dup":            never("fds.Dup (F_DUPFD_CLOEXEC)"),
	"Dup2":           never("Dup3 with O_CLOEXEC"),
	"Pipe":           never("Pipe2 with O_CLOEXEC"),
	"Accept":         never("Accept4 with SOCK_CLOEXEC"),
	"InotifyInit":    never("InotifyInit1 with IN_CLOEXEC"),
	"EpollCreate":    never("EpollCreate1 with EPOLL_CLOEXEC"),
	"Creat":          never("Open with O_CLOEXEC"),
}

// rawFDCalls are system calls that make a descriptor; made raw, the check
// cannot read their flags, so each needs the mark and its reason.
var rawFDCalls = []string{"SYS_OPEN", "SYS_OPENAT", "SYS_OPENAT2", "SYS_CREAT", "SYS_DUP", "SYS_DUP2", "SYS_DUP3",
	"SYS_FCNTL", "SYS_SOCKET", "SYS_SOCKETPAIR", "SYS_ACCEPT", "SYS_ACCEPT4", "SYS_PIPE", "SYS_PIPE2",
	"SYS_MEMFD_CREATE", "SYS_MEMFD_SECRET", "SYS_OPEN_TREE", "SYS_FSOPEN", "SYS_FSMOUNT", "SYS_FSPICK",
	"SYS_RECVMSG", "SYS_RECVMMSG", "SYS_INOTIFY_INIT", "SYS_INOTIFY_INIT1", "SYS_EPOLL_CREATE",
	"SYS_EPOLL_CREATE1", "SYS_EVENTFD", "SYS_EVENTFD2", "SYS_SIGNALFD", "SYS_SIGNALFD4", "SYS_TIMERFD_CREATE",
	"SYS_FANOTIFY_INIT", "SYS_USERFAULTFD", "SYS_PERF_EVENT_OPEN", "SYS_BPF", "SYS_IO_URING_SETUP",
	"SYS_SECCOMP", "SYS_OPEN_BY_HANDLE_AT", "SYS_CLONE", "SYS_CLONE3", "SYS_PIDFD_OPEN", "SYS_PIDFD_GETFD"}

// finding is a call that makes a descriptor a child would inherit.
type finding struct {
	pos  token.Position
	call string
	why  string
}

func (f finding) String() string { return fmt.Sprintf("%s: %s %s", f.pos, f.call, f.why) }

// pkgFiles is one package's parsed files and its package-level values,
// which a flag argument may name (var resolveHow = unix.OpenHow{...}).
type pkgFiles struct {
	fset   *token.FileSet
	files  []*ast.File
	values map[string]ast.Expr
}

func parsePackage(fset *token.FileSet, paths []string, src map[string]string) (*pkgFiles, error) {
	p := &pkgFiles{fset: fset, values: map[string]ast.Expr{}}
	for _, path := range paths {
		var text any
		if src != nil {
			text = src[path]
		}
		f, err := parser.ParseFile(fset, path, text, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, f)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || (g.Tok != token.VAR && g.Tok != token.CONST) {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						p.values[n.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	return p, nil
}

// check returns every call in the package that makes a descriptor without
// close-on-exec and carries no exempting mark with a reason.
func (p *pkgFiles) check() []finding {
	var out []finding
	for _, f := range p.files {
		sysPkgs := map[string]bool{}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path != "golang.org/x/sys/unix" && path != "syscall" {
				continue
			}
			name := filepath.Base(path)
			if imp.Name != nil {
				name = imp.Name.Name
			}
			sysPkgs[name] = true
		}
		if len(sysPkgs) == 0 {
			continue
		}
		marks := exemptLines(p.fset, f)
		// The call each selector is the function of; one that is not
		// called is used as a value.
		calls := map[*ast.SelectorExpr]*ast.CallExpr{}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
					calls[sel] = call
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok || !sysPkgs[pkg.Name] {
				return true
			}
			var why string
			if call := calls[sel]; call != nil {
				why = p.judge(sel.Sel.Name, call)
			} else if makesDescriptor(sel.Sel.Name) {
				// open := unix.Open; open(p, 0, 0): the calls through the
				// value are out of the check's sight.
				why = "is used as a value, and the flags of its calls are out of this check's sight: call it directly"
			}
			if why == "" {
				return true
			}
			pos := p.fset.Position(sel.Pos())
			if reason, ok := marks[pos.Line]; ok {
				if reason != "" {
					return true
				}
				why += "; the " + exemptMark + " mark needs a reason"
			} else if reason, ok := marks[pos.Line-1]; ok {
				if reason != "" {
					return true
				}
				why += "; the " + exemptMark + " mark needs a reason"
			}
			out = append(out, finding{pos: pos, call: pkg.Name + "." + sel.Sel.Name, why: why})
			return true
		})
	}
	return out
}

// makesDescriptor reports whether the system package's function name
// makes a descriptor (or may, as fcntl and raw calls do).
func makesDescriptor(name string) bool {
	switch name {
	case "FcntlInt", "Syscall", "Syscall6", "RawSyscall", "RawSyscall6", "SyscallNoError", "RawSyscallNoError":
		return true
	}
	_, ok := fdCalls[name]
	return ok
}

// exemptLines maps the line of each exempting mark to its reason.
func exemptLines(fset *token.FileSet, f *ast.File) map[int]string {
	marks := map[int]string{}
	for _, g := range f.Comments {
		for _, c := range g.List {
			if rest, ok := strings.CutPrefix(c.Text, exemptMark); ok {
				marks[fset.Position(c.Pos()).Line] = strings.TrimSpace(rest)
			}
		}
	}
	return marks
}

// judge says what is wrong with a call of the system package named name,
// or "" when it makes no descriptor or asks for close-on-exec.
func (p *pkgFiles) judge(name string, call *ast.CallExpr) string {
	switch name {
	case "FcntlInt":
		if len(call.Args) > 1 && p.mentions(call.Args[1], func(s string) bool { return s == "F_DUPFD" }, 0) {
			return "duplicates with F_DUPFD: use F_DUPFD_CLOEXEC (fds.Dup)"
		}
		if len(call.Args) > 2 && p.mentions(call.Args[1], func(s string) bool { return s == "F_SETFD" }, 0) &&
			!p.mentions(call.Args[2], func(s string) bool { return s == "FD_CLOEXEC" }, 0) {
			return "sets the descriptor flags without FD_CLOEXEC, which clears close-on-exec"
		}
		return ""
	case "Syscall", "Syscall6", "RawSyscall", "RawSyscall6", "SyscallNoError", "RawSyscallNoError":
		if len(call.Args) > 0 && p.mentions(call.Args[0], func(s string) bool { return slices.Contains(rawFDCalls, s) }, 0) {
			return "makes a descriptor with a raw system call, whose flags this check cannot read: say why it is close-on-exec"
		}
		return ""
	}
	r, ok := fdCalls[name]
	if !ok {
		return ""
	}
	if r.never != "" {
		return "makes a descriptor without close-on-exec: use " + r.never
	}
	if r.ifArg >= 0 && r.ifArg < len(call.Args) {
		if id, ok := call.Args[r.ifArg].(*ast.Ident); ok && id.Name == "nil" {
			return ""
		}
	}
	if r.flagArg >= len(call.Args) {
		return "has fewer arguments than the check expects"
	}
	if !p.mentions(call.Args[r.flagArg], func(s string) bool { return slices.Contains(r.flags, s) }, 0) {
		return "without " + strings.Join(r.flags, " or ") + " in its flags"
	}
	return ""
}

// mentions reports whether expr names a constant that want accepts,
// following local variables and package-level values to what they were
// set to (how := resolveHow; flags := unix.O_RDONLY | unix.O_CLOEXEC).
func (p *pkgFiles) mentions(expr ast.Expr, want func(string) bool, depth int) bool {
	if depth > 8 {
		return false
	}
	found := false
	ast.Inspect(expr, func(n ast.Node) bool {
		if found {
			return false
		}
		switch n := n.(type) {
		case *ast.BinaryExpr:
			// flags &^ O_CLOEXEC names the flag to take it away.
			if n.Op == token.AND_NOT {
				found = p.mentions(n.X, want, depth+1)
				return false
			}
		case *ast.SelectorExpr:
			if want(n.Sel.Name) {
				found = true
			}
			return !found
		case *ast.Ident:
			if want(n.Name) {
				found = true
				return false
			}
			if v := p.valueOf(n); v != nil {
				found = p.mentions(v, want, depth+1)
			}
		}
		return !found
	})
	return found
}

// valueOf is what the identifier id was last set to where it was declared:
// a local := or var, or a package-level var or const. A parameter has no
// value here: a wrapper must add the flag itself.
func (p *pkgFiles) valueOf(id *ast.Ident) ast.Expr {
	if id.Obj == nil {
		return p.values[id.Name]
	}
	switch d := id.Obj.Decl.(type) {
	case *ast.AssignStmt:
		for i, l := range d.Lhs {
			if li, ok := l.(*ast.Ident); ok && li.Name == id.Name && i < len(d.Rhs) {
				return d.Rhs[i]
			}
		}
	case *ast.ValueSpec:
		for i, n := range d.Names {
			if n.Name == id.Name && i < len(d.Values) {
				return d.Values[i]
			}
		}
	}
	return nil
}

// moduleRoot is the directory of go.mod above this package.
func moduleRoot(t *testing.T) string {
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = up
	}
}

// productPackages lists the non-test Go files of the module by directory.
func productPackages(t *testing.T, root string) map[string][]string {
	pkgs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "build" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// Every descriptor stockade's own code makes is close-on-exec, or says why
// not: one without the flag, open at the moment another goroutine starts a
// jail, is inherited by that jail's init (copy-back's directory duplicate
// was, and listed the host's directories from the payload).
func TestEveryDescriptorIsMadeCloseOnExec(t *testing.T) {
	root := moduleRoot(t)
	pkgs := productPackages(t, root)
	if len(pkgs) < 15 {
		t.Fatalf("found only %d packages below %s", len(pkgs), root)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, files := range pkgs {
		p, err := parsePackage(fset, files, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range p.check() {
			rel, _ := filepath.Rel(root, f.pos.Filename)
			t.Errorf("%s:%d: %s %s", rel, f.pos.Line, f.call, f.why)
		}
		checked += len(files)
	}
	t.Logf("%d files in %d packages checked", checked, len(pkgs))
}

// The check itself finds each way of making an inheritable descriptor,
// and lets through each way of asking for close-on-exec.
func TestCloseOnExecCheckFindsEachWay(t *testing.T) {
	const src = `package x

import (
	"syscall"
	sys "golang.org/x/sys/unix"
)

var how = sys.OpenHow{Flags: sys.O_RDONLY | sys.O_CLOEXEC}
var bareHow = sys.OpenHow{Flags: sys.O_RDONLY}

const dirFlags = sys.O_DIRECTORY | sys.O_CLOEXEC

func f(flags int, oob []byte) {
	sys.Open("/", sys.O_RDONLY, 0)                      // BAD open
	sys.Open("/", sys.O_RDONLY|sys.O_CLOEXEC, 0)
	sys.Open("/", sys.O_RDONLY|sys.FD_CLOEXEC, 0)       // BAD FD_CLOEXEC is O_WRONLY as an open flag
	sys.MemfdCreate("m", sys.MFD_CLOEXEC)
	sys.Fsopen("tmpfs", sys.FSOPEN_CLOEXEC)
	sys.Fsmount(3, sys.O_CLOEXEC, 0)                    // BAD not the call's own flag
	sys.Openat(3, "x", dirFlags, 0)
	sys.Openat(3, "x", flags, 0)                        // BAD parameter
	local := sys.O_RDONLY | sys.O_CLOEXEC
	sys.Openat(3, "x", local, 0)
	sys.Openat2(3, "x", &how)
	h := bareHow
	sys.Openat2(3, "x", &h)                             // BAD openat2
	sys.Openat2(3, "x", &sys.OpenHow{Flags: sys.O_PATH}) // BAD literal
	sys.Dup(3)                                          // BAD dup
	syscall.Dup2(3, 4)                                  // BAD dup2
	sys.FcntlInt(3, sys.F_DUPFD, 0)                     // BAD F_DUPFD
	sys.FcntlInt(3, sys.F_DUPFD_CLOEXEC, 0)
	sys.Socket(1, sys.SOCK_STREAM, 0)                   // BAD socket
	sys.Socketpair(1, sys.SOCK_SEQPACKET|sys.SOCK_CLOEXEC, 0)
	sys.Pipe(nil)                                       // BAD pipe
	sys.MemfdCreate("m", 0)                             // BAD memfd
	sys.Recvmsg(3, nil, nil, 0)
	sys.Recvmsg(3, nil, oob, 0)                         // BAD recvmsg
	sys.Recvmsg(3, nil, oob, sys.MSG_CMSG_CLOEXEC)
	sys.Recvmsg(3, nil, oob, sys.O_CLOEXEC)             // BAD wrong flag
	sys.Syscall(sys.SYS_SECCOMP, 1, 2, 3)               // BAD raw
	//stockade:no-cloexec the kernel makes the listener close-on-exec
	sys.Syscall(sys.SYS_SECCOMP, 1, 2, 3)
	sys.Dup(4) //stockade:no-cloexec handed to a child on purpose
	sys.Dup(5) //stockade:no-cloexec
	sys.Close(3)
	sys.FcntlInt(3, sys.F_SETFD, 0)                     // BAD clears the flag
	sys.FcntlInt(3, sys.F_SETFD, sys.FD_CLOEXEC)
	sys.Fspick(3, "x", 0)                               // BAD fspick
	sys.Fspick(3, "x", sys.FSPICK_CLOEXEC)
	sys.RecvmsgBuffers(3, nil, oob, 0)                  // BAD recvmsg into buffers
	sys.RecvmsgBuffers(3, nil, oob, sys.MSG_CMSG_CLOEXEC)
	sys.PerfEventOpen(nil, 0, -1, -1, 0)                // BAD perf event
	sys.PerfEventOpen(nil, 0, -1, -1, sys.PERF_FLAG_FD_CLOEXEC)
	sys.MemfdSecret(0)                                  // BAD secret memfd
	sys.MemfdSecret(sys.O_CLOEXEC)
	sys.Open("/", flags&^sys.O_CLOEXEC, 0)              // BAD the flag taken away
	open := sys.Open                                    // BAD a call the check cannot see
	open("/", sys.O_RDONLY, 0)
	syscall.Open("/", syscall.O_RDONLY, 0)              // BAD the syscall package's
}
`
	fset := token.NewFileSet()
	p, err := parsePackage(fset, []string{"x.go"}, map[string]string{"x.go": src})
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for i, line := range strings.Split(src, "\n") {
		if strings.Contains(line, "// BAD") || strings.HasSuffix(line, exemptMark) {
			want = append(want, i+1)
		}
	}
	var got []int
	for _, f := range p.check() {
		got = append(got, f.pos.Line)
		t.Logf("%s", f)
	}
	if !slices.Equal(got, want) {
		t.Errorf("findings on lines %v, want %v", got, want)
	}
}
