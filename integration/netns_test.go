package integration

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// netns is a network namespace of the test's own, with its loopback up:
// a node started in it listens where no one outside can connect, but
// through a forwarder (forward).
type netns struct{ f *os.File }

// newNetns makes a network namespace, kept until the test ends. It needs
// root.
func newNetns(t testing.TB) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: the test runs a node in a network namespace of its own")
	}
	var f *os.File
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: the thread, moved into the namespace, ends with
		// the goroutine instead of running others.
		runtime.LockOSThread()
		if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
			err = fmt.Errorf("unshare: %w", err)
			return
		}
		if err = loopbackUp(); err != nil {
			return
		}
		f, err = os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	}()
	<-done
	if err != nil {
		t.Fatalf("new network namespace: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return &netns{f: f}
}

// loopbackUp brings up lo in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

// do runs f on a thread inside the namespace, and waits for it: the
// sockets f makes and the processes it starts belong to the namespace.
func (ns *netns) do(t testing.TB, f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked, as in newNetns
		if err := unix.Setns(int(ns.f.Fd()), unix.CLONE_NEWNET); err != nil {
			t.Errorf("enter the network namespace: %v", err)
			return
		}
		f()
	}()
	<-done
}

// listen listens on a free port of 127.0.0.1 inside the namespace.
func (ns *netns) listen(t testing.TB) net.Listener {
	t.Helper()
	var lis net.Listener
	var err error
	ns.do(t, func() { lis, err = net.Listen("tcp", "127.0.0.1:0") })
	if err != nil || lis == nil {
		t.Fatalf("listen in the network namespace: %v", err)
	}
	return lis
}

// dialer returns a dial of addr from inside the namespace.
func (ns *netns) dialer(t testing.TB, addr string) func() (net.Conn, error) {
	return func() (c net.Conn, err error) {
		err = fmt.Errorf("dial %s: not entered", addr)
		ns.do(t, func() { c, err = net.Dial("tcp", addr) })
		return c, err
	}
}

// forward accepts connections on lis until the test ends and joins each
// to a connection dial makes: a TCP forwarder, between namespaces. It
// returns lis's address.
func forward(t testing.TB, lis net.Listener, dial func() (net.Conn, error)) string {
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return // closed
			}
			go func() {
				defer c.Close()
				u, err := dial()
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{})
				go func() {
					io.Copy(u, c)
					u.(*net.TCPConn).CloseWrite()
					close(done)
				}()
				io.Copy(c, u)
				c.(*net.TCPConn).CloseWrite()
				<-done
			}()
		}
	}()
	return lis.Addr().String()
}
