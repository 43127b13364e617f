package repl

import (
	"context"

	"github.com/cmfs-project/cmfs/journal"
)

// Events is the journal as dump reads it: a local log, or a remote one
// relayed over gRPC.
type Events interface {
	// Last returns the id of the newest event, 0 for an empty journal.
	Last(ctx context.Context) (uint64, error)
	// Range calls fn for every event with from <= id <= to, in id order,
	// and stops at fn's first error, returning it.
	Range(ctx context.Context, from, to uint64, fn func(*journal.Event) error) error
}

// JournalEvents adapts a local journal.Log (opened read-only, or the
// mount's own) to Events.
func JournalEvents(l *journal.Log) Events { return journalEvents{l} }

type journalEvents struct{ l *journal.Log }

func (j journalEvents) Last(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return j.l.Last(), nil
}

func (j journalEvents) Range(ctx context.Context, from, to uint64, fn func(*journal.Event) error) error {
	return j.l.Range(from, to, func(e *journal.Event) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(e)
	})
}
