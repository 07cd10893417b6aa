package rootfs

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
)

// Problem is one reason a directory cannot serve as a jail root.
type Problem struct {
	Path    string // as the jail would see it: "/usr/bin/su"
	Message string
}

func (p Problem) String() string { return p.Path + ": " + p.Message }

// checkSkip are the top-level directories the jail mounts over or never
// binds from a prepared root (as Dir skips them), so what they hold never
// reaches a jail.
var checkSkip = map[string]bool{"proc": true, "dev": true, "sys": true, "tmp": true, "work": true, "run": true}

// Check says whether dir can serve as a jail root, statically: it runs
// nothing from dir. It looks for
//
//   - a python3 at /usr/bin/python3 or /bin/python3 (symlinks resolved
//     inside dir, as the jail would) that is an ELF executable for this
//     machine, whose ELF interpreter and every shared library it needs,
//     transitively, resolve inside dir (DT_RUNPATH and DT_RPATH, dir's own
//     /etc/ld.so.cache, then the standard library directories);
//   - anything world-writable, except sticky directories such as a tmp;
//   - setuid or setgid files, device nodes, FIFOs and sockets;
//   - anything the jail user (uid and gid 1000) could write.
//
// The top-level proc, dev, sys, tmp, work and run are not looked into: the
// jail mounts its own. No problems means dir is fit.
func Check(dir string) []Problem {
	fi, err := os.Stat(dir)
	if err != nil {
		return []Problem{{Path: dir, Message: err.Error()}}
	}
	if !fi.IsDir() {
		return []Problem{{Path: dir, Message: "not a directory"}}
	}
	var probs []Problem
	probs = append(probs, checkPython(dir)...)
	return append(probs, checkTree(dir)...)
}

func checkTree(dir string) []Problem {
	var probs []Problem
	add := func(rel, msg string) {
		probs = append(probs, Problem{Path: path.Join("/", filepath.ToSlash(rel)), Message: msg})
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		if err != nil {
			add(rel, err.Error())
			return nil
		}
		if d.IsDir() && rel != "." && filepath.Dir(rel) == "." && checkSkip[rel] {
			return fs.SkipDir
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil // a symlink's own mode means nothing
		}
		fi, err := d.Info()
		if err != nil {
			add(rel, err.Error())
			return nil
		}
		for _, msg := range modeProblems(fi) {
			add(rel, msg)
		}
		return nil
	})
	if err != nil {
		add(".", err.Error())
	}
	return probs
}

// modeProblems judges one file's type, mode and owner.
func modeProblems(fi fs.FileInfo) []string {
	var msgs []string
	m := fi.Mode()
	switch {
	case m&fs.ModeCharDevice != 0:
		msgs = append(msgs, "character device: a jail root holds no device nodes")
	case m&fs.ModeDevice != 0:
		msgs = append(msgs, "block device: a jail root holds no device nodes")
	case m&fs.ModeNamedPipe != 0:
		msgs = append(msgs, "named pipe")
	case m&fs.ModeSocket != 0:
		msgs = append(msgs, "socket")
	}
	if m.IsRegular() && m&fs.ModeSetuid != 0 {
		msgs = append(msgs, "setuid")
	}
	if m.IsRegular() && m&fs.ModeSetgid != 0 {
		msgs = append(msgs, "setgid")
	}
	if m.Perm()&0o002 != 0 && !(m.IsDir() && m&fs.ModeSticky != 0) {
		msgs = append(msgs, fmt.Sprintf("world-writable (%04o)", m.Perm()))
	}
	if uid, gid, ok := owner(fi); ok {
		if uid == JailUID && m.Perm()&0o200 != 0 {
			msgs = append(msgs, fmt.Sprintf("writable by the jail user (owner uid %d)", JailUID))
		}
		if gid == JailGID && m.Perm()&0o020 != 0 {
			msgs = append(msgs, fmt.Sprintf("writable by the jail user's group (group gid %d)", JailGID))
		}
	}
	return msgs
}
