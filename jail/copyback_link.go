package jail

import "strings"

// linkStaysInside reports whether a symlink the jail made at rel (its
// path below DIR, slash-separated) leads to a place inside DIR, judged
// from its target alone: copy-back never recreates one that leads out,
// since the host processes that later follow it (as root, perhaps) are
// not jailed. An absolute target leads out: the jail's / is not the
// host's. A relative one may climb with leading ".." no higher than DIR,
// then name its way down; a ".." after a name is refused, since it climbs
// from wherever that name leads, and the name may be a symlink
// ("up/../.." with up -> ".." escapes). What a name below DIR leads to is
// the host's own business (its own symlinks) or another link checked
// here.
func linkStaysInside(rel, target string) bool {
	if target == "" || strings.HasPrefix(target, "/") {
		return false
	}
	depth := strings.Count(rel, "/") // directories between DIR and the link
	up, named := 0, false
	for _, part := range strings.Split(target, "/") {
		switch part {
		case "", ".":
		case "..":
			if named {
				return false
			}
			up++
		default:
			named = true
		}
	}
	return up <= depth
}
