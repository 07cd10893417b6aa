package seccomp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The user-notification ABI (linux/seccomp.h). x/sys/unix has the ioctl
// numbers but not the structures.

type notifData struct {
	Nr   int32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

type notifReq struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  notifData
}

type notifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32 // never SECCOMP_USER_NOTIF_FLAG_CONTINUE
}

func notifRecv(fd int, req *notifReq) error {
	*req = notifReq{} // the kernel refuses a buffer that is not zeroed
	return ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(req))
}

func notifSend(fd int, resp *notifResp) error {
	return ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(resp))
}

func ioctlPtr(fd int, req uint, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}
