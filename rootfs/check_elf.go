package rootfs

import (
	"debug/elf"
	"fmt"
	"os"
	"path"
	"runtime"
	"strings"
)

// pythonPaths are where a jail looks for python3, in order.
var pythonPaths = []string{"/usr/bin/python3", "/bin/python3"}

// maxLibraries bounds the walk over DT_NEEDED: a CPython needs about ten.
const maxLibraries = 500

func checkPython(dir string) []Problem {
	var jailPath, hostPath string
	for _, p := range pythonPaths {
		if jp, hp, err := resolveIn(dir, p); err == nil {
			jailPath, hostPath = jp, hp
			break
		}
	}
	if hostPath == "" {
		return []Problem{{Path: pythonPaths[0], Message: "no python3 here or at " + strings.Join(pythonPaths[1:], ", ")}}
	}
	fi, err := os.Stat(hostPath)
	switch {
	case err != nil:
		return []Problem{{Path: jailPath, Message: err.Error()}}
	case !fi.Mode().IsRegular():
		return []Problem{{Path: jailPath, Message: "python3 is not a regular file"}}
	case fi.Mode().Perm()&0o111 == 0:
		return []Problem{{Path: jailPath, Message: "python3 is not executable"}}
	}
	f, err := elf.Open(hostPath)
	if err != nil {
		return []Problem{{Path: jailPath, Message: "python3 is not an ELF executable: " + err.Error()}}
	}
	defer f.Close()
	var probs []Problem
	if want, ok := goarchMachine[runtime.GOARCH]; ok && f.Machine != want {
		probs = append(probs, Problem{Path: jailPath, Message: fmt.Sprintf("python3 is built for %s; this machine is %s", f.Machine, want)})
	}
	l := &linker{root: dir, cache: readLDCache(dir), seen: map[string]bool{jailPath: true}}
	return append(probs, l.check(jailPath, f)...)
}

// goarchMachine maps Go's architectures to ELF machines.
var goarchMachine = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "arm": elf.EM_ARM,
	"ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV, "loong64": elf.EM_LOONGARCH,
}

// multiarch are Debian's library directory triplets per ELF machine.
var multiarch = map[elf.Machine]string{
	elf.EM_X86_64: "x86_64-linux-gnu", elf.EM_AARCH64: "aarch64-linux-gnu", elf.EM_386: "i386-linux-gnu",
	elf.EM_ARM: "arm-linux-gnueabihf", elf.EM_PPC64: "powerpc64le-linux-gnu", elf.EM_S390: "s390x-linux-gnu",
	elf.EM_RISCV: "riscv64-linux-gnu", elf.EM_LOONGARCH: "loongarch64-linux-gnu",
}

// linker follows an executable's ELF interpreter and DT_NEEDED libraries
// through a root as ld.so would, without running anything.
type linker struct {
	root  string
	cache map[string][]string // ld.so.cache: soname -> jail paths
	seen  map[string]bool     // jail paths already checked
}

// check checks the file at jailPath (already open as f) and, recursively,
// each library it needs.
func (l *linker) check(jailPath string, f *elf.File) []Problem {
	var probs []Problem
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		buf := make([]byte, p.Filesz)
		if _, err := p.ReadAt(buf, 0); err != nil {
			return append(probs, Problem{Path: jailPath, Message: "unreadable ELF interpreter: " + err.Error()})
		}
		interp := strings.TrimRight(string(buf), "\x00")
		if _, hp, err := resolveIn(l.root, interp); err != nil {
			probs = append(probs, Problem{Path: jailPath, Message: fmt.Sprintf("its ELF interpreter %s does not resolve inside the root: %v", interp, err)})
		} else if !sameArch(hp, f) {
			probs = append(probs, Problem{Path: jailPath, Message: fmt.Sprintf("its ELF interpreter %s is not for %s", interp, f.Machine)})
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return append(probs, Problem{Path: jailPath, Message: "unreadable dynamic section: " + err.Error()})
	}
	dirs := l.searchDirs(jailPath, f)
	for _, lib := range needed {
		jp, hp, looked := l.find(lib, dirs, f)
		if hp == "" {
			probs = append(probs, Problem{Path: jailPath, Message: fmt.Sprintf("needs %s, which is not in the root (looked in %s)", lib, looked)})
			continue
		}
		if l.seen[jp] {
			continue
		}
		l.seen[jp] = true
		if len(l.seen) > maxLibraries {
			return append(probs, Problem{Path: jailPath, Message: fmt.Sprintf("more than %d libraries needed; stopped looking", maxLibraries)})
		}
		lf, err := elf.Open(hp)
		if err != nil {
			probs = append(probs, Problem{Path: jp, Message: "not an ELF library: " + err.Error()})
			continue
		}
		probs = append(probs, l.check(jp, lf)...)
		lf.Close()
	}
	return probs
}

// searchDirs are where ld.so looks for f's libraries besides the cache:
// DT_RPATH (only when there is no DT_RUNPATH), DT_RUNPATH, then the default
// directories. LD_LIBRARY_PATH does not count: the jail sets no such thing.
func (l *linker) searchDirs(jailPath string, f *elf.File) []string {
	var dirs []string
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	rpath, _ := f.DynString(elf.DT_RPATH)
	use := runpath
	if len(runpath) == 0 {
		use = rpath
	}
	for _, entry := range use {
		for _, d := range strings.Split(entry, ":") {
			d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", "$ORIGIN"), "$ORIGIN", path.Dir(jailPath))
			if path.IsAbs(d) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

func (l *linker) defaultDirs(f *elf.File) []string {
	var dirs []string
	if t, ok := multiarch[f.Machine]; ok {
		dirs = append(dirs, "/lib/"+t, "/usr/lib/"+t)
	}
	if f.Class == elf.ELFCLASS64 {
		dirs = append(dirs, "/lib64", "/usr/lib64")
	}
	return append(dirs, "/lib", "/usr/lib", "/usr/local/lib")
}

// find locates the library lib for f: rpath/runpath dirs, the cache, then
// the default directories, taking the first candidate built for f's class
// and machine, as ld.so skips the others. looked says where it looked.
func (l *linker) find(lib string, dirs []string, f *elf.File) (jailPath, hostPath, looked string) {
	if strings.Contains(lib, "/") {
		if jp, hp, err := resolveIn(l.root, lib); err == nil && sameArch(hp, f) {
			return jp, hp, ""
		}
		return "", "", lib
	}
	var candidates []string
	for _, d := range dirs {
		candidates = append(candidates, path.Join(d, lib))
	}
	candidates = append(candidates, l.cache[lib]...)
	def := l.defaultDirs(f)
	for _, d := range def {
		candidates = append(candidates, path.Join(d, lib))
	}
	for _, c := range candidates {
		if jp, hp, err := resolveIn(l.root, c); err == nil && sameArch(hp, f) {
			return jp, hp, ""
		}
	}
	where := append(append([]string{}, dirs...), "the root's ld.so.cache")
	return "", "", strings.Join(append(where, def...), ", ")
}

// sameArch reports whether the ELF file at hostPath has f's class and machine.
func sameArch(hostPath string, f *elf.File) bool {
	g, err := elf.Open(hostPath)
	if err != nil {
		return false
	}
	defer g.Close()
	return g.Class == f.Class && g.Machine == f.Machine
}
