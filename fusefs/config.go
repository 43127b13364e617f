package fusefs

import (
	"log/slog"
	"path/filepath"
	"time"

	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/protect"
)

// Config says what to mount and how.
type Config struct {
	// Backing is the directory the mount passes through to.
	Backing string
	// State holds the journal, the control socket and, by default,
	// cmroot. Default: Backing/.cmfs. It is hidden from the mount.
	State string
	// CMRoot is the preservation store. Default: State/cmroot.
	CMRoot string
	// Retain is cmroot's retention.
	Retain time.Duration
	// Exclude lists globs of path components that are not protected;
	// nil means statedir.DefaultExcludes.
	Exclude []string
	// AllowOther lets other users use the mount (implies
	// default_permissions).
	AllowOther bool
	// Options are extra mount options (-o), passed to the kernel.
	Options []string
	// Debug logs every FUSE request (go-fuse's lines, to Logger at
	// debug).
	Debug bool
	// Logger is where the mount logs; nil means nowhere.
	Logger *slog.Logger
	// JournalReserve is the space kept allocated for the journal
	// (journal.Options.Reserve); 0 means the journal's default.
	JournalReserve int64
	// Sync and SyncInterval say when a change is durable (journal.Options
	// Sync and Interval).
	Sync         journal.SyncMode
	SyncInterval time.Duration

	// Stats, when set, is where Mount counts the operations (NewStats);
	// nil: Mount counts into its own.
	Stats *Stats

	// Reconcile, Since and Tail are what Mount (and Recover) hand the
	// protection core's recovery (protect.Options): compare the whole
	// tree with the journal, because the last mount, started at Since, did
	// not stop cleanly and the machine has booted since
	// (statedir.Record.LostWrites); what the journal's tail check found
	// as it opened (Config.TailCheck).
	Reconcile bool
	Since     time.Time
	Tail      *protect.TailReport
}

// TailCheck returns the journal.Options.CheckTail of the mount cfg
// describes, filling report (which the caller then sets as cfg.Tail).
// cfg must have its defaults filled in.
func (cfg Config) TailCheck(report *protect.TailReport) func([]*journal.Event, []int) int {
	return protect.TailCheck(cfg.protection(), cfg.CMRoot, report)
}

// WithDefaults returns cfg with every unset field filled in.
func (cfg Config) WithDefaults() Config {
	if cfg.State == "" {
		cfg.State = filepath.Join(cfg.Backing, statedir.Name)
	}
	if cfg.CMRoot == "" {
		cfg.CMRoot = filepath.Join(cfg.State, statedir.CMRootDir)
	}
	if cfg.Exclude == nil {
		cfg.Exclude = statedir.DefaultExcludes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}
