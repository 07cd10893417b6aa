package jail

import "os"

// DefaultHost is this process's host as its environment describes it:
// HTTPS_PROXY (or https_proxy) as the upstream proxy, STOCKADE_NET_HOSTS as
// the hosts file; stockade's own cgroup and the default cache directory.
func DefaultHost() Host {
	return Host{
		UpstreamProxy: firstEnv("HTTPS_PROXY", "https_proxy"),
		HostsFile:     os.Getenv("STOCKADE_NET_HOSTS"),
	}
}

func firstEnv(keys ...string) string {
	for _, k := range keys {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return ""
}
