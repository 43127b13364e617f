package journal

import "github.com/cmfs-project/cmfs/internal/failpoint"

// The commit path's failpoints (internal/failpoint), for tests that kill
// the writer between its steps:
//
//   - journal/written: a group is written to the WAL, not synced;
//   - journal/synced: the group and what it names are durable, not
//     acknowledged or shown to readers;
//   - journal/applied: bbolt holds events the WAL holds too, the memory
//     tail not trimmed yet;
//   - journal/segment: the writer is about to start the other segment;
//   - journal/closing: Close has put everything into bbolt and is about to
//     empty the WAL.
var (
	fpWritten = failpoint.Register("journal/written")
	fpSynced  = failpoint.Register("journal/synced")
	fpApplied = failpoint.Register("journal/applied")
	fpSegment = failpoint.Register("journal/segment")
	fpClosing = failpoint.Register("journal/closing")
)

func hit(name string) {
	if failpoint.Armed() {
		failpoint.Hit(name)
	}
}
