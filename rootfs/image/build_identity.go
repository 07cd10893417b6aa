package image

import (
	"fmt"

	"github.com/stockade/stockade/rootfs"
)

// The jail user, named in a built root as in the host-derived one.
const (
	jailUser = rootfs.JailUser
	jailUID  = rootfs.JailUID
	jailGID  = rootfs.JailGID
)

// identityFiles are the /etc files Build generates, replacing what the
// packages installed: only root, nobody and the jail user exist, and no
// account has a password.
func identityFiles() map[string]string {
	return map[string]string{
		"etc/passwd": fmt.Sprintf(""+
			"root:x:0:0:root:/root:/usr/sbin/nologin\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"+
			"%s:x:%d:%d:stockade jail user:/work:/bin/sh\n", jailUser, jailUID, jailGID),
		"etc/group": fmt.Sprintf(""+
			"root:x:0:\n"+
			"nogroup:x:65534:\n"+
			"%s:x:%d:\n", jailUser, jailGID),
		"etc/shadow":  "root:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n" + jailUser + ":*:19000:0:99999:7:::\n",
		"etc/gshadow": "root:*::\nnogroup:*::\n" + jailUser + ":*::\n",
	}
}
