package seccomp

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// NetAttempt is an observed call that names an IPv4 or IPv6 destination.
type NetAttempt struct {
	Call string         // connect, sendto, sendmsg or sendmmsg
	Pid  int            // the caller, as the host sees it
	Dest netip.AddrPort // the destination it named
}

// NetObserver decides an observed call: true lets it continue to the
// kernel, false answers it ENETUNREACH, which is what the kernel of a
// namespace without a route would answer anyway.
type NetObserver func(NetAttempt) bool

// ObserveNetwork makes s pass the policy's observed calls that name an IP
// destination to f. Without it they all continue. Call it before Run.
func (s *Supervisor) ObserveNetwork(f NetObserver) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observer = f
}

// observedCall names the observed calls by number.
func observedCall(nr int32) string {
	switch nr {
	case unix.SYS_CONNECT:
		return "connect"
	case unix.SYS_SENDTO:
		return "sendto"
	case unix.SYS_SENDMSG:
		return "sendmsg"
	case unix.SYS_SENDMMSG:
		return "sendmmsg"
	}
	return ""
}

// observe answers an observed call. The destination is read from the
// caller's memory with process_vm_readv, then the notification is checked
// to be still live, so the bytes are known to be this caller's. Anything
// unreadable continues: the kernel reads the same memory and fails the
// call itself, and the namespace, not this answer, is what confines it.
func (s *Supervisor) observe(req *notifReq, call string) notifResp {
	cont := notifResp{ID: req.ID, Flags: userNotifFlagContinue}
	s.mu.Lock()
	f := s.observer
	s.mu.Unlock()
	if f == nil {
		return cont
	}
	pid := int(req.Pid)
	a := req.Data.Args
	var dests []netip.AddrPort
	add := func(d netip.AddrPort, ok bool) {
		if ok {
			dests = append(dests, d)
		}
	}
	switch call {
	case "connect":
		add(readSockaddr(pid, a[1], a[2]))
	case "sendto":
		add(readSockaddr(pid, a[4], a[5]))
	case "sendmsg":
		add(readMsgName(pid, a[1]))
	case "sendmmsg":
		n := a[2]
		if n > 1024 { // UIO_MAXIOV: the kernel caps vlen there
			n = 1024
		}
		for i := uint64(0); i < n; i++ {
			// struct mmsghdr: a struct msghdr (56 bytes) and msg_len, 64.
			add(readMsgName(pid, a[1]+i*64))
		}
	}
	if len(dests) == 0 || notifIDValid(s.notifyFD, req.ID) != nil {
		return cont
	}
	for _, d := range dests {
		if !f(NetAttempt{Call: call, Pid: pid, Dest: d}) {
			return notifResp{ID: req.ID, Error: -int32(unix.ENETUNREACH)}
		}
	}
	return cont
}

// readMsgName reads msg_name of the struct msghdr at ptr.
func readMsgName(pid int, ptr uint64) (netip.AddrPort, bool) {
	var hdr [16]byte // void *msg_name; socklen_t msg_namelen
	if ptr == 0 || !readMem(pid, ptr, hdr[:]) {
		return netip.AddrPort{}, false
	}
	name := binary.NativeEndian.Uint64(hdr[0:8])
	nlen := binary.NativeEndian.Uint32(hdr[8:12])
	return readSockaddr(pid, name, uint64(nlen))
}

// readSockaddr decodes an AF_INET or AF_INET6 address; other families
// (AF_UNIX, AF_UNSPEC to disconnect) are not network destinations.
func readSockaddr(pid int, ptr, size uint64) (netip.AddrPort, bool) {
	if ptr == 0 || size < 2 {
		return netip.AddrPort{}, false
	}
	var b [28]byte
	if size > uint64(len(b)) {
		size = uint64(len(b))
	}
	if !readMem(pid, ptr, b[:size]) {
		return netip.AddrPort{}, false
	}
	switch binary.NativeEndian.Uint16(b[0:2]) {
	case unix.AF_INET:
		if size < 8 {
			return netip.AddrPort{}, false
		}
		port := binary.BigEndian.Uint16(b[2:4])
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), true
	case unix.AF_INET6:
		if size < 24 {
			return netip.AddrPort{}, false
		}
		port := binary.BigEndian.Uint16(b[2:4])
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), port), true
	}
	return netip.AddrPort{}, false
}

func readMem(pid int, ptr uint64, buf []byte) bool {
	local := []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}}
	remote := []unix.RemoteIovec{{Base: uintptr(ptr), Len: len(buf)}}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	return err == nil && n == len(buf)
}

// userNotifFlagContinue is SECCOMP_USER_NOTIF_FLAG_CONTINUE.
const userNotifFlagContinue = 1

func notifIDValid(fd int, id uint64) error {
	return ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id))
}
