package systemd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// The variables systemd sets for a service it watches.
const (
	socketEnv      = "NOTIFY_SOCKET"
	watchdogEnv    = "WATCHDOG_USEC"
	watchdogPIDEnv = "WATCHDOG_PID"
)

// Enabled says whether a service manager listens (NOTIFY_SOCKET is set).
func Enabled() bool { return os.Getenv(socketEnv) != "" }

// Ready says the daemon is up, with status as its STATUS= line (none if
// empty).
func Ready(status string) error { return notify(daemon.SdNotifyReady, status) }

// Status sets the daemon's status line, which `systemctl status` shows.
func Status(status string) error { return notify("", status) }

// Stopping says the daemon has begun to stop, with status as its STATUS=
// line (none if empty).
func Stopping(status string) error { return notify(daemon.SdNotifyStopping, status) }

// notify sends state and a status line in one datagram, so the manager
// sees them together.
func notify(state, status string) error {
	if !Enabled() {
		return nil
	}
	var lines []string
	if state != "" {
		lines = append(lines, state)
	}
	if status != "" {
		// One line: a newline would start another assignment.
		lines = append(lines, "STATUS="+strings.ReplaceAll(status, "\n", " "))
	}
	if len(lines) == 0 {
		return nil
	}
	if _, err := daemon.SdNotify(false, strings.Join(lines, "\n")); err != nil {
		return fmt.Errorf("sd_notify %s: %w", os.Getenv(socketEnv), err)
	}
	return nil
}

// WatchdogInterval returns WATCHDOG_USEC, the longest the manager waits
// between two WATCHDOG=1, or 0 when it watches nothing (no notify socket,
// no WATCHDOG_USEC, or WATCHDOG_PID naming another process).
//
// Errors: a WATCHDOG_USEC or WATCHDOG_PID that is not a positive number.
func WatchdogInterval() (time.Duration, error) {
	if !Enabled() {
		return 0, nil
	}
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0, fmt.Errorf("systemd watchdog: %w", err)
	}
	return d, nil
}

// Probe proves the daemon alive, within ctx's deadline.
type Probe func(ctx context.Context) error

// Watchdog runs until ctx ends: every half of WatchdogInterval it runs
// probe, given that half as its deadline, and sends WATCHDOG=1 when the
// probe succeeds. A probe that fails sends nothing and is logged at warn:
// if it keeps failing, the manager's watchdog fires and it restarts the
// service as the unit says. It returns at once when no watchdog is set.
//
// Errors: WatchdogInterval's; nil when ctx ends.
func Watchdog(ctx context.Context, probe Probe, log *slog.Logger) error {
	return keepAlive(ctx, probe, log, func(time.Duration) string { return daemon.SdNotifyWatchdog })
}

// ExtendStart is Watchdog for a daemon that is not ready yet, which the
// manager does not watch: after each probe that succeeds it sends
// EXTEND_TIMEOUT_USEC= the watchdog interval instead, so the start may
// outlast the unit's TimeoutStartSec= for as long as probe keeps proving
// the daemon alive, and fails within an interval of the probe failing.
// Run it from the start until Ready; it returns at once when no watchdog
// is set, leaving the start to TimeoutStartSec= alone.
//
// Errors: WatchdogInterval's; nil when ctx ends.
func ExtendStart(ctx context.Context, probe Probe, log *slog.Logger) error {
	return keepAlive(ctx, probe, log, func(interval time.Duration) string {
		return fmt.Sprintf("EXTEND_TIMEOUT_USEC=%d", interval.Microseconds())
	})
}

// keepAlive runs probe every half of WatchdogInterval until ctx ends and
// sends msg(interval) after each success.
func keepAlive(ctx context.Context, probe Probe, log *slog.Logger, msg func(interval time.Duration) string) error {
	interval, err := WatchdogInterval()
	if err != nil || interval <= 0 {
		return err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	every := interval / 2
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, every)
		err := probe(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			log.Warn("watchdog probe failed: not telling the service manager this process is alive",
				slog.Duration("watchdog", interval), slog.Any("err", err))
		default:
			if err := notify(msg(interval), ""); err != nil {
				log.Warn("watchdog", slog.Any("err", err))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Environ returns env without the variables that address the service
// manager, for a process this one starts that is not the service's main
// process.
func Environ(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == socketEnv || name == watchdogEnv || name == watchdogPIDEnv
	})
}
