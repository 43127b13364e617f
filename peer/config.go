package peer

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/cmfs-project/cmfs/internal/tlsconfig"
)

// Defaults of Config.
const (
	DefaultConcurrency       = 10
	DefaultTaskTimeout       = time.Hour
	DefaultAttempts          = 5
	DefaultBackoff           = 500 * time.Millisecond
	DefaultStreamIdleTimeout = 30 * time.Second
	DefaultStreamDeadline    = 10 * time.Minute
	DefaultStreamMinRate     = 1 << 20
	// maxBackoff caps the wait between two attempts.
	maxBackoff = 30 * time.Second
)

// Config says how a Server serves and replicates.
type Config struct {
	// NodeID and Rack name the node; they label its metrics.
	NodeID string
	Rack   string
	// Addr is the address other nodes reach this one at: what a target
	// downloads from when this node replicates in pull mode. Default: the
	// address Serve listens on (with TLS, the name in the certificate is
	// usually the better choice).
	Addr string
	// TLS names the node's certificate, key and CA. Zero: no TLS, and
	// only loopback addresses are served and dialed.
	TLS tlsconfig.Config
	// Token, without TLS, is what every call to the node must carry, and
	// what the node sends to the peers it dials (internal/auth): nodes on
	// one host share one token. A node needs TLS or a token.
	Token string
	// Pull makes the node replicate in pull mode (the target downloads)
	// when a Replicate request leaves the mode to it (NodeDefault):
	// `replicad serve --push=false`.
	Pull bool
	// Bandwidth caps the replication data this node sends (pushes and
	// downloads it serves together), in bytes per second. 0: no cap.
	Bandwidth int64
	// Concurrency is how many replication tasks run at once (twice as
	// many while the node is decommissioning). Default 10.
	Concurrency int
	// TaskTimeout is a task's deadline, from when it is submitted, unless
	// the task sets its own. Default 1h.
	TaskTimeout time.Duration
	// Attempts bounds the transfers one task starts; Backoff is the wait
	// before the second, doubling (with jitter) for each further one, up
	// to 30s. Defaults 5 and 500ms.
	Attempts int
	Backoff  time.Duration
	// StreamIdleTimeout is how long a stream this node serves or reads
	// (Push, Put, Download, Get, and the download of a Fetch) may wait
	// for its peer: for a message to arrive, or for the peer to take
	// one. A stream that waits longer is cut (ErrUnavailable: a push is
	// retried), and its import discarded. Default 30s.
	StreamIdleTimeout time.Duration
	// StreamDeadline and StreamMinRate bound a whole stream: it is cut
	// (context.DeadlineExceeded) unless done within StreamDeadline or
	// the bytes it carries at StreamMinRate bytes per second, whichever
	// is longer: the size a Push declares, the container a Download
	// sends, the block a Get sends, what a Put has received so far.
	// Defaults 10m and 1 MiB/s.
	StreamDeadline time.Duration
	StreamMinRate  int64
	// Logger is told, at debug, of every call the node serves and every
	// replication task it ends, and of calls cut when it stops (warn).
	// Default: none.
	Logger *slog.Logger
}

// withDefaults fills in the defaults and checks the rest.
func (c Config) withDefaults() (Config, error) {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.TaskTimeout == 0 {
		c.TaskTimeout = DefaultTaskTimeout
	}
	if c.Attempts == 0 {
		c.Attempts = DefaultAttempts
	}
	if c.Backoff == 0 {
		c.Backoff = DefaultBackoff
	}
	if c.StreamIdleTimeout == 0 {
		c.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if c.StreamDeadline == 0 {
		c.StreamDeadline = DefaultStreamDeadline
	}
	if c.StreamMinRate == 0 {
		c.StreamMinRate = DefaultStreamMinRate
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.StreamIdleTimeout < 0:
		return c, fmt.Errorf("peer: stream idle timeout %v: %w", c.StreamIdleTimeout, ErrInvalid)
	case c.StreamDeadline < 0:
		return c, fmt.Errorf("peer: stream deadline %v: %w", c.StreamDeadline, ErrInvalid)
	case c.StreamMinRate < 0:
		return c, fmt.Errorf("peer: stream minimum rate %d: %w", c.StreamMinRate, ErrInvalid)
	case c.Concurrency < 0:
		return c, fmt.Errorf("peer: concurrency %d: %w", c.Concurrency, ErrInvalid)
	case c.TaskTimeout < 0:
		return c, fmt.Errorf("peer: task timeout %v: %w", c.TaskTimeout, ErrInvalid)
	case c.Attempts < 0:
		return c, fmt.Errorf("peer: attempts %d: %w", c.Attempts, ErrInvalid)
	case c.Backoff < 0:
		return c, fmt.Errorf("peer: backoff %v: %w", c.Backoff, ErrInvalid)
	case c.Bandwidth < 0:
		return c, fmt.Errorf("peer: bandwidth %d: %w", c.Bandwidth, ErrInvalid)
	}
	return c, nil
}
