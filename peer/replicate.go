package peer

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cmfs-project/cmfs/internal/backoff"
	"github.com/cmfs-project/cmfs/internal/tlsconfig"
)

// replicate is the Supervisor's ReplicateFunc: it copies t.Container to
// t.Target, starting the transfer again after a failure that may pass
// (retryable), up to Config.Attempts transfers.
func (s *Server) replicate(ctx context.Context, t Task) (Result, error) {
	c, err := s.dial(ctx, t.Target)
	if err != nil {
		return Result{}, fmt.Errorf("replicate container %d to %s: %w", t.Container, t.Target, err)
	}
	defer c.Close()
	res := Result{Mode: t.Mode}
	res.Attempts, err = s.retry(ctx, func() error {
		var r ImportResult
		var err error
		if t.Mode == Pull {
			r, err = c.Fetch(ctx, FetchRequest{Container: t.Container, Compression: t.Compression, Sources: []string{s.Addr()}, WaitScan: t.WaitScan})
			if errors.Is(err, ErrUnavailable) {
				// Most often the address is one only this side can reach.
				err = fmt.Errorf("the target downloads from this node at %s (serve --advertise sets it): %w", s.Addr(), err)
			}
		} else {
			r, err = s.push(ctx, c, t)
		}
		res.Descriptor, res.Bytes = r.Descriptor, r.Bytes
		if s.clientTLS != nil && retryable(err) {
			// A certificate refused in TLS 1.3 can look like a broken
			// pipe; it is refused again however often it is retried.
			if perr := tlsconfig.Probe(ctx, t.Target, s.clientTLS); perr != nil {
				return refusal{perr}
			}
		}
		return err
	})
	if err != nil {
		attempts := "1 attempt"
		if res.Attempts != 1 {
			attempts = fmt.Sprintf("%d attempts", res.Attempts)
		}
		return res, fmt.Errorf("replicate container %d to %s (%s, %s): %w", t.Container, t.Target, t.Mode, attempts, err)
	}
	return res, nil
}

// push exports the container straight into a Push stream to the target,
// held to the node's bandwidth limit.
func (s *Server) push(ctx context.Context, c *Client, t Task) (ImportResult, error) {
	d, err := s.store.Descriptor(t.Container)
	if err != nil {
		return ImportResult{}, err
	}
	h := PushHeader{Container: t.Container, Size: d.Size(), Compression: t.Compression, WaitScan: t.WaitScan}
	return s.pushWith(ctx, c, h, func(ctx context.Context, w io.Writer) error {
		return s.store.Export(ctx, t.Container, t.Compression, w)
	})
}

// exportFunc writes a container's tarball to w: Store.Export, or a
// staged EC index's Export.
type exportFunc func(ctx context.Context, w io.Writer) error

// pushWith streams what export writes into a Push stream to the target,
// held to the node's bandwidth limit.
func (s *Server) pushWith(ctx context.Context, c *Client, h PushHeader, export exportFunc) (ImportResult, error) {
	p, err := c.Push(ctx, h)
	if err != nil {
		return ImportResult{}, err
	}
	w := limit(ctx, s.lim, countWriter{p, s.sup.m.sent})
	if err := export(ctx, w); err != nil {
		p.Abort()
		if perr := p.Err(); perr != nil {
			return ImportResult{}, perr // the target's refusal, not the export's
		}
		return ImportResult{}, err
	}
	return p.Finish()
}

// retry runs f until it succeeds, fails for good, or has run
// Config.Attempts times, waiting Config.Backoff (doubling, with jitter)
// between runs. It returns how many times f ran and its last error.
func (s *Server) retry(ctx context.Context, f func() error) (int, error) {
	b := backoff.Backoff{Min: s.cfg.Backoff, Max: maxBackoff}
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || !retryable(err) || attempt >= s.cfg.Attempts || ctx.Err() != nil {
			return attempt, err
		}
		if s.onRetry != nil {
			s.onRetry(attempt, err)
		}
		if backoff.Sleep(ctx, b.Next()) != nil {
			return attempt, err
		}
	}
}

// countWriter counts what passes into a metric.
type countWriter struct {
	w io.Writer
	c prometheus.Counter
}

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.c.Add(float64(n))
	return n, err
}

// refusal is a certificate refusal found by a probe: ErrUnauthenticated,
// in the probe's words.
type refusal struct{ err error }

func (r refusal) Error() string   { return r.err.Error() }
func (r refusal) Unwrap() []error { return []error{r.err, ErrUnauthenticated} }
