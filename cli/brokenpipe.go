package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// cancelOnBrokenOutput returns a context that also ends when the reader of
// one of fds (stdout and stderr) goes away: phobos chaos | head, once head
// has its lines. Left to Go's default, the next write to such a pipe kills
// the process on the spot, and a command running a cluster (chaos, up,
// bench) left its processes' directories, and chaos its tmpfs mounts and
// its cluster's processes, behind. Once SIGPIPE is notified, the process
// is not killed by it; writes to the pipe fail instead, while the command
// cleans up as after an interrupt.
//
// A notified process receives every SIGPIPE, including those raised by a
// write to a socket whose peer has gone (a head writing to a raylet that
// was killed), which must stop nothing. So each one is checked against
// fds: only a pipe or socket among them whose other end has closed ends
// the context. checked, when not nil, is told each check's verdict (for
// tests). The returned cancel stops the notification too.
func cancelOnBrokenOutput(parent context.Context, checked chan<- bool, fds ...int) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGPIPE)
	go func() {
		for {
			select {
			case <-sig:
			case <-ctx.Done():
				return
			}
			broken := false
			for _, fd := range fds {
				broken = broken || readerGone(fd)
			}
			if checked != nil {
				checked <- broken
			}
			if broken {
				cancel()
				return
			}
		}
	}()
	return ctx, func() { cancel(); signal.Stop(sig) }
}

// readerGone reports whether fd is a pipe or socket whose reading end has
// closed: poll says so with POLLERR (a pipe) or POLLHUP (a socket). A
// terminal, a file or /dev/null never does.
func readerGone(fd int) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(p, 0)
	return err == nil && n > 0 && p[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
}
