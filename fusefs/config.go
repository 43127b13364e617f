package fusefs

import (
	"log/slog"
	"path/filepath"
	"time"

	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
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
