// Package kernel is the one protocol between the server and the Python
// interpreter in each of its jails: the driver every jail runs (driver.py,
// embedded; Args is the jail's command line), the frames the server sends
// it (a jail's one job, Run or Session, then a session's Requests), the
// channel those frames travel on (Conn: a unix stream socket passed as the
// jail's descriptor 3, length-prefixed JSON, the kernel's credentials on
// every read) and the check that the driver's process still runs the
// program the server started (Image). What the server keeps of the
// driver's answers, and the caps it holds them to, is the server's: the
// driver runs in the program's own interpreter, and nothing it says is
// trusted beyond what the program could say of itself.
package kernel
