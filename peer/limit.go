package peer

import (
	"context"
	"fmt"
	"io"

	"golang.org/x/time/rate"
)

// newLimiter returns the node's bandwidth limiter for bytesPerSec, nil
// for no limit. The burst, an eighth of a second's worth between 16 KiB
// and 1 MiB, keeps the rate smooth without a wait per small write.
func newLimiter(bytesPerSec int64) *rate.Limiter {
	if bytesPerSec <= 0 {
		return nil
	}
	burst := min(max(bytesPerSec/8, 16<<10), 1<<20)
	return rate.NewLimiter(rate.Limit(bytesPerSec), int(burst))
}

// limitWriter passes writes to w as fast as lim allows; lim is shared by
// every transfer of the node.
type limitWriter struct {
	ctx context.Context
	lim *rate.Limiter
	w   io.Writer
}

// limit returns w held to lim, or w itself without a limit.
func limit(ctx context.Context, lim *rate.Limiter, w io.Writer) io.Writer {
	if lim == nil {
		return w
	}
	return &limitWriter{ctx: ctx, lim: lim, w: w}
}

func (l *limitWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), l.lim.Burst())
		if err := l.lim.WaitN(l.ctx, k); err != nil {
			if l.ctx.Err() == nil {
				// The wait would pass ctx's deadline: it has as good as come.
				return n, fmt.Errorf("bandwidth limit: %v: %w", err, context.DeadlineExceeded)
			}
			return n, l.ctx.Err()
		}
		k, err := l.w.Write(p[:k])
		n += k
		p = p[k:]
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
