// Package systemd tells the service manager that started a daemon how it
// is doing, by the sd_notify protocol: READY=1 once it does what it is
// for, STATUS= lines on the way, STOPPING=1 when it begins to stop, and
// WATCHDOG=1 while a probe of its own proves it alive — or, before it is
// ready, EXTEND_TIMEOUT_USEC=, for a start that takes as long as it takes
// while the daemon is alive.
//
// Everything is keyed on the environment systemd sets for a Type=notify
// service: without NOTIFY_SOCKET every call is a no-op that returns nil,
// so a daemon run from a shell behaves exactly as before. The watchdog
// runs only when WATCHDOG_USEC is set (and WATCHDOG_PID, if set, names
// this process). The datagrams are written by
// github.com/coreos/go-systemd/v22/daemon; this package decides what to
// send when.
//
// A daemon that starts another process of itself (cmfs mount --daemon)
// must not hand these variables on: the manager listens to its main
// process only, and the child is not it (Environ).
package systemd
