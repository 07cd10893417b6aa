package jail

import (
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/hostenv"
)

// idm builds a map from inside, outside, count triples.
func idm(v ...uint32) hostenv.IDMap {
	var m hostenv.IDMap
	for i := 0; i+2 < len(v); i += 3 {
		m = append(m, hostenv.IDRange{Inside: v[i], Outside: v[i+1], Count: v[i+2]})
	}
	return m
}

var (
	hostMap     = idm(0, 0, 4294967295)
	rootOnlyMap = idm(0, 100000, 1)
	// rootless podman: root is the user, 1..65536 its subordinate ids.
	podmanMap = idm(0, 1000, 1, 1, 100000, 65536)
	// a namespace whose only id is host root: nothing may be given away.
	hostRootOnlyMap = idm(0, 0, 1)
)

func TestPickJailIDNeverPicksRootAbove(t *testing.T) {
	cases := []struct {
		name string
		m    hostenv.IDMap
		want int
		ok   bool
	}{
		{"host", hostMap, HostID, true},
		{"full container map", idm(0, 200000, 4294967295-200000), HostID, true},
		{"root only, unprivileged outside", rootOnlyMap, 0, true},
		{"rootless podman", podmanMap, 65536, true},
		{"root only, host root outside", hostRootOnlyMap, -1, false},
		{"a range whose top is the overflow id", idm(0, 0, 1, 65534, 300000, 1, 100, 200100, 10), 109, true},
		{"nothing mapped", nil, -1, false},
	}
	for _, c := range cases {
		got, ok := pickJailID(c.m, HostID)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: pickJailID = %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
		if ok {
			if out, _ := c.m.Outside(got); out == 0 {
				t.Errorf("%s: picked %d, which is root above", c.name, got)
			}
		}
	}
}

func TestChooseIdentityInEachNamespaceShape(t *testing.T) {
	cases := []struct {
		name     string
		env      idEnv
		uid, gid int
		setGroup bool
		err      string
	}{
		{"host root", idEnv{uid: 0, gid: 0, uidMap: hostMap, gidMap: hostMap}, HostID, HostID, true, ""},
		{"host user", idEnv{uid: 1000, gid: 1000, uidMap: hostMap, gidMap: hostMap, groups: []int{1000, 27}}, 1000, 1000, false, ""},
		{"host user in the root group", idEnv{uid: 1000, gid: 1000, uidMap: hostMap, gidMap: hostMap, groups: []int{0}}, 0, 0, false, "supplementary group 0"},
		{"root of a root-only namespace", idEnv{uid: 0, gid: 0, uidMap: rootOnlyMap, gidMap: rootOnlyMap, setfcap: true}, 0, 0, true, ""},
		{"root of a root-only namespace without CAP_SETFCAP", idEnv{uid: 0, gid: 0, uidMap: rootOnlyMap, gidMap: rootOnlyMap}, 0, 0, false, "--cap-add=SETFCAP"},
		{"root of a rootless podman namespace", idEnv{uid: 0, gid: 0, uidMap: podmanMap, gidMap: podmanMap}, 65536, 65536, true, ""},
		{"setgroups denied keeps groups", idEnv{uid: 0, gid: 0, uidMap: podmanMap, gidMap: podmanMap, setgroupsDenied: true, groups: []int{0}}, 65536, 65536, false, ""},
		{"namespace mapping only host root", idEnv{uid: 0, gid: 0, uidMap: hostRootOnlyMap, gidMap: hostRootOnlyMap}, 0, 0, false, "no unprivileged uid"},
		{"host root without the mapping capabilities", idEnv{uid: 0, gid: 0, uidMap: hostMap, gidMap: hostMap, missingCaps: []string{"CAP_SETUID"}}, 0, 0, false, "--cap-add=SETUID"},
		{"namespace root without the capabilities", idEnv{uid: 0, gid: 0, uidMap: rootOnlyMap, gidMap: rootOnlyMap, missingCaps: []string{"CAP_CHOWN"}, setfcap: true}, 0, 0, false, ""},
	}
	for _, c := range cases {
		id, err := chooseIdentityIn(Spec{}, c.env, sourcePolicy{})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err = %v, want one saying %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if id.hostUID != c.uid || id.hostGID != c.gid || id.setGroups != c.setGroup {
			t.Errorf("%s: got %+v, want uid %d gid %d setgroups %v", c.name, id, c.uid, c.gid, c.setGroup)
		}
	}
}
