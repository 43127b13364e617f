package fs

import (
	"errors"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Mount mounts cfg.Backing at mountpoint with protection. The journal and
// the store are the caller's: they must stay open until the returned
// server has been unmounted and waited for. cfg must have its defaults
// filled in (Config.WithDefaults).
func Mount(mountpoint string, cfg Config, j *journal.Log, store *cmroot.Store) (*fuse.Server, error) {
	return nil, errors.New("unimplemented")
}
