package upkeep

import (
	"context"
	"fmt"

	"github.com/cmfs-project/cmfs/journal"
)

// walkBatch bounds how many events one read transaction collects: events
// are delivered outside the transaction, so a slow reader never holds the
// journal's database open against its writer.
const walkBatch = 512

// Walk calls fn for every event with from <= id <= to in id order (from 0
// means 1; to 0 means the newest). With follow it then waits for new
// events and delivers them too, until to is reached, fn fails or ctx ends
// (returning ctx.Err()).
func Walk(ctx context.Context, j *journal.Log, from, to uint64, follow bool, fn func(*journal.Event) error) error {
	if from == 0 {
		from = 1
	}
	if to != 0 && to < from {
		return fmt.Errorf("%w: range from %d to %d is empty", ErrInvalid, from, to)
	}
	next := from
	for {
		last := j.Last()
		if to != 0 && last > to {
			last = to
		}
		for next <= last {
			end := min(next+walkBatch-1, last)
			batch := make([]*journal.Event, 0, end-next+1)
			if err := j.Range(next, end, func(e *journal.Event) error {
				batch = append(batch, e)
				return nil
			}); err != nil {
				return err
			}
			for _, e := range batch {
				if err := ctx.Err(); err != nil {
					return err
				}
				if err := fn(e); err != nil {
					return err
				}
			}
			next = end + 1
		}
		if !follow || (to != 0 && next > to) {
			return nil
		}
		if _, err := j.Wait(ctx, next-1); err != nil {
			return err
		}
	}
}
