package rootfs

// The jail user, as jail.JailUser, jail.JailUID and jail.JailGID define it
// (jail imports rootfs, so the values are repeated, not imported): Check
// judges a root's ownership by it, and a built root names it as the
// host-derived root does, so that getpass.getuser() and pwd.getpwuid()
// inside agree either way.
const (
	JailUser = "sandbox"
	JailUID  = 1000
	JailGID  = 1000
)
