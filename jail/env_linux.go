package jail

import "strings"

// jailPath is the payload's PATH and where Args[0] is looked up.
var jailPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// jailEnv is the payload's environment: the fixed variables and the
// run's own (such as matplotlib's MPLCONFIGDIR), each replaced by a
// spec.Env entry of the same name, then the rest of spec.Env. A name
// appears once: with two, libc's getenv reads the first and Python's
// os.environ the last, and the payload's parts would disagree.
func jailEnv(spec Spec, run ...string) []string {
	env := append([]string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/work", "LANG=C.UTF-8", "USER=" + JailUser, "LOGNAME=" + JailUser,
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1",
		// Debian's EXTERNALLY-MANAGED marker (PEP 668) stops every pip
		// install before pip looks at the index, with advice (apt, a
		// venv) that a jail cannot follow, so an offline run never
		// learned that the network was missing. What the marker guards,
		// the system's packages, the jail cannot write anyway (a
		// read-only root, an unprivileged user): pip installs into
		// ~/.local (/work) instead, or fails on the network.
		"PIP_BREAK_SYSTEM_PACKAGES=1",
	}, run...)
	env = append(env, proxyEnv(spec.Network)...)
	index := make(map[string]int, len(env))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		index[k] = i
	}
	for _, kv := range spec.Env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			env[i] = kv
			continue
		}
		index[k] = len(env)
		env = append(env, kv)
	}
	return env
}
