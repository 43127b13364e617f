package fusefs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/protect"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Timeouts for the kernel's caches. Every change to the tree passes
// through the mount, so caching is safe; changes made behind its back in
// the backing directory show up after at most this long.
const (
	entryTimeout    = time.Second
	attrTimeout     = time.Second
	negativeTimeout = time.Second
)

// Mount mounts cfg.Backing at mountpoint with protection, and says what
// recovery found a mount that died had left. The journal and
// the store are the caller's: they must stay open until the returned
// server has been unmounted and waited for. cfg must have its defaults
// filled in (Config.WithDefaults).
func Mount(mountpoint string, cfg Config, j *journal.Log, store *cmroot.Store) (*fuse.Server, protect.Recovery, error) {
	// The kernel has applied the caller's umask to every mode it hands
	// over (it masks in the VFS whether or not FUSE_DONT_MASK is granted,
	// since the mount has no POSIX ACLs): the daemon's own must not mask
	// it again. cmfs's own files all name their modes.
	syscall.Umask(0)
	core, rec, err := protect.Open(context.Background(), cfg.protection(), j, store)
	if err != nil {
		return nil, rec, err
	}
	stats := cfg.Stats
	if stats == nil {
		stats = NewStats()
	}
	stats.core.Store(core)
	r := &root{core: core, stats: stats}
	backing := core.Backing()
	var bst syscall.Stat_t
	if err := syscall.Stat(backing, &bst); err != nil {
		core.Close()
		return nil, rec, fmt.Errorf("backing %s: %w", backing, err)
	}

	lr := &gofs.LoopbackRoot{Path: backing, Dev: uint64(bst.Dev)}
	rootNode := &node{LoopbackNode: &gofs.LoopbackNode{RootData: lr}, r: r}
	lr.RootNode = rootNode

	entry, attr, neg := entryTimeout, attrTimeout, negativeTimeout
	opts := &gofs.Options{
		EntryTimeout:    &entry,
		AttrTimeout:     &attr,
		NegativeTimeout: &neg,
		// Report modes as they are, 0 included.
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			FsName:     backing,
			Name:       "cmfs",
			AllowOther: cfg.AllowOther,
			Debug:      cfg.Debug || os.Getenv("CMFS_FUSE_DEBUG") != "",
			// O_TRUNC must arrive with OPEN, or the kernel would open the
			// file for writing first and the original would be copied.
			// HANDLE_KILLPRIV_V2: writes ask nothing of the daemon, which
			// clears set-ID bits itself (setid.go).
			ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_HANDLE_KILLPRIV_V2,
			// As root, mount(2) directly and strictly: a fallback to
			// fusermount3 would hide the kernel's reason for a refusal
			// (an unknown option) behind "fusermount exited with code
			// 256". EPERM (no CAP_SYS_ADMIN) still falls back below.
			DirectMount:       os.Geteuid() == 0,
			DirectMountStrict: os.Geteuid() == 0,
			MaxBackground:     64,
		},
	}
	// go-fuse logs through a *log.Logger: with Debug a line per request
	// (the mount's debug lines), else only what went wrong (warnings).
	fuseLevel := slog.LevelWarn
	if opts.MountOptions.Debug {
		fuseLevel = slog.LevelDebug
	}
	opts.MountOptions.Logger = slog.NewLogLogger(cfg.Logger.Handler(), fuseLevel)
	if p := os.Getenv("CMFS_FUSE_DEBUG"); p != "" {
		// A test's seam: the requests in a file of their own.
		if lf, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0644); err == nil {
			opts.MountOptions.Logger = slog.NewLogLogger(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelDebug}), slog.LevelDebug)
		}
	}
	mo := append([]string(nil), cfg.Options...)
	if cfg.AllowOther {
		mo = append(mo, "default_permissions")
	}
	opts.MountOptions.Options = mo

	raw := &gatedFS{RawFileSystem: gofs.NewNodeFS(rootNode, opts), gate: &core.Gate, kills: &r.kills}
	server, err := fuse.NewServer(raw, mountpoint, &opts.MountOptions)
	if err != nil && opts.MountOptions.DirectMountStrict && errors.Is(err, syscall.EPERM) {
		opts.MountOptions.DirectMount, opts.MountOptions.DirectMountStrict = false, false
		server, err = fuse.NewServer(raw, mountpoint, &opts.MountOptions)
	}
	if err != nil {
		core.Close()
		if errors.Is(err, syscall.EINVAL) && len(mo) > 0 {
			return nil, rec, fmt.Errorf("the kernel refused the mount options %s (an unknown or malformed option?): %w", strings.Join(mo, ","), err)
		}
		return nil, rec, err
	}
	go func() {
		server.Serve()
		core.Close() // every handle is released when Serve returns
	}()
	if err := server.WaitMount(); err != nil {
		server.Unmount()
		return nil, rec, err
	}
	return server, rec, nil
}

// gatedFS holds the core's Gate shared for the whole of a release, including
// go-fuse's unregistration of the node's passthrough backing file, marks
// the requests whose caller must lose set-ID bits and keeps the handles
// that must see their writes out of passthrough (setid.go).
type gatedFS struct {
	fuse.RawFileSystem
	gate  *sync.RWMutex
	kills *killFlags
}

func (g *gatedFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if in.Mode&fuse.OPEN_KILL_SUIDGID != 0 {
		defer g.kills.mark(cancel)()
	}
	st := g.RawFileSystem.Open(cancel, in, out)
	notPassedThrough(out)
	return st
}

func (g *gatedFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if in.OpenFlags&fuse.OPEN_KILL_SUIDGID != 0 {
		defer g.kills.mark(cancel)()
	}
	st := g.RawFileSystem.Create(cancel, in, name, out)
	notPassedThrough(&out.OpenOut)
	return st
}

func (g *gatedFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if in.WriteFlags&fuse.WRITE_KILL_SUIDGID != 0 {
		defer g.kills.mark(cancel)()
	}
	return g.RawFileSystem.Write(cancel, in, data)
}

func (g *gatedFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if in.WriteFlags&fuse.WRITE_KILL_SUIDGID != 0 {
		defer g.kills.mark(cancel)()
	}
	return g.RawFileSystem.Writev(cancel, in, data)
}

func (g *gatedFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	g.gate.RLock()
	defer g.gate.RUnlock()
	g.RawFileSystem.Release(cancel, in)
}

// Recover brings the journal up to date with the changes a mount that died
// left without their events, for a state directory nothing has mounted:
// `cmfs fsck --repair` runs it.
func Recover(ctx context.Context, cfg Config, j *journal.Log, store *cmroot.Store) (protect.Recovery, error) {
	core, rec, err := protect.Open(ctx, cfg.protection(), j, store)
	if err != nil {
		return rec, err
	}
	return rec, core.Close()
}

// protection is what the protection core is told of cfg.
func (cfg Config) protection() protect.Options {
	return protect.Options{
		Backing:   cfg.Backing,
		State:     cfg.State,
		Exclude:   cfg.Exclude,
		Hidden:    []string{cfg.State, cfg.CMRoot},
		Reconcile: cfg.Reconcile,
		Since:     cfg.Since,
		Tail:      cfg.Tail,
	}
}
