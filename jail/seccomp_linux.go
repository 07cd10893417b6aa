package jail

import "fmt"

// loadSeccomp installs the named policy on the calling thread and hands the
// listener fd to the parent. Wired to the seccomp package once it lands.
func loadSeccomp(name string) error {
	if name == "off" {
		return nil
	}
	return fmt.Errorf("seccomp policy %q: not available in this build", name)
}
