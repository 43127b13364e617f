package protect

import (
	"fmt"
	"strings"

	"github.com/cmfs-project/cmfs/internal/failpoint"
	"github.com/cmfs-project/cmfs/journal"
)

// Every protected change goes through the same steps, and a failpoint
// (internal/failpoint) sits after each, named "<change>/<step>" with the
// change's generic type in lower case ("delete/preserved",
// "truncate/applied", "write/journaled"):
//
//   - intended: its intent is in the in-flight table; nothing changed yet;
//   - preserved: the original is in cmroot, named in the intent; the change
//     is not made;
//   - applied: the change is made; nothing is flushed or journaled;
//   - flushed: what its event names is durable; the event is not;
//   - journaled: the event is durable; the intent is not cleared.
//
// A test kills the mount at one of them and checks that recovery leaves a
// journal that describes the tree and no original lost.
const (
	stepIntended  = "intended"
	stepPreserved = "preserved"
	stepApplied   = "applied"
	stepFlushed   = "flushed"
	stepJournaled = "journaled"
)

// changeTypes are the generic types of the changes the mount journals.
var changeTypes = []journal.Type{journal.Delete, journal.Rename, journal.Truncate, journal.Write, journal.Mkdir, journal.Rmdir, journal.Link, journal.Symlink}

func init() {
	for _, t := range changeTypes {
		for _, step := range []string{stepIntended, stepPreserved, stepApplied, stepFlushed, stepJournaled} {
			failpoint.Register(failpointName(t, step))
		}
	}
}

func failpointName(t journal.Type, step string) string {
	return strings.ToLower(string(t)) + "/" + step
}

// hit marks the failpoint of change type t at step.
func hit(t journal.Type, step string) {
	if failpoint.Armed() {
		failpoint.Hit(failpointName(t, step))
	}
}

// crashed carries a test's crash at a failpoint hit in another goroutine
// back to the caller's, as an error.
type crashedAt struct{ v any }

func (c *crashedAt) Error() string { return fmt.Sprintf("crashed at a failpoint: %v", c.v) }
