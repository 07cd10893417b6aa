package rootfs

import "fmt"

// The jail user, as jail.JailUser, jail.JailUID and jail.JailGID define it
// (jail imports rootfs, so the values are repeated, not imported): a built
// root names the jail user as the host-derived root does, so that
// getpass.getuser() and pwd.getpwuid() inside agree either way.
const (
	jailUser = "sandbox"
	jailUID  = 1000
	jailGID  = 1000
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
