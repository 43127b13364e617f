package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cmfs-project/cmfs/api/controlpb"
	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/upkeep"
)

// Client talks to a mount's control socket.
type Client struct {
	conn *grpc.ClientConn
	rpc  controlpb.ControlClient
}

// Dial returns a client for the socket at socketPath. It fails with
// ErrUnavailable when no socket is there; whether a mount answers on it
// shows at the first call (Status is the cheap probe).
func Dial(socketPath string) (*Client, error) {
	abs, err := filepath.Abs(socketPath)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", socketPath, err)
	}
	fi, err := os.Stat(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("dial %s: %w", socketPath, ErrUnavailable)
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", socketPath, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("dial %s: not a socket", socketPath)
	}
	conn, err := grpc.NewClient("unix://"+abs,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// An event of an rm -r names every file it preserved.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)),
	)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", socketPath, err)
	}
	return &Client{conn: conn, rpc: controlpb.NewControlClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Status is what a mount reports about itself.
type Status struct {
	Mountpoint  string `json:"mountpoint"`
	Backing     string `json:"backing"`
	State       string `json:"state"`
	CMRoot      string `json:"cmroot"`
	PID         int    `json:"pid"`
	LastEventID uint64 `json:"last_event_id"`
	CMEntries   int    `json:"cm_entries"`
	CMBytes     int64  `json:"cm_bytes"`
	Commit      Commit `json:"commit"`
}

// Commit describes the mount's commit path (controlpb.CommitStats).
type Commit struct {
	Sync       string `json:"sync"`
	Groups     uint64 `json:"groups"`
	Events     uint64 `json:"events"`
	Flushes    uint64 `json:"flushes"`
	WALSyncs   uint64 `json:"wal_syncs"`
	PathSyncs  uint64 `json:"path_syncs"`
	Applies    uint64 `json:"applies"`
	FlushP50US uint64 `json:"flush_p50_us"`
	FlushP99US uint64 `json:"flush_p99_us"`
}

// Status asks the mount for its status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	r, err := c.rpc.Status(ctx, &controlpb.StatusRequest{})
	if err != nil {
		return Status{}, fromStatus(err)
	}
	return Status{
		Mountpoint:  r.Mountpoint,
		Backing:     r.Backing,
		State:       r.State,
		CMRoot:      r.Cmroot,
		PID:         int(r.Pid),
		LastEventID: r.LastEventId,
		CMEntries:   int(r.CmEntries),
		CMBytes:     r.CmBytes,
		Commit: Commit{
			Sync:       r.GetCommit().GetSync(),
			Groups:     r.GetCommit().GetGroups(),
			Events:     r.GetCommit().GetEvents(),
			Flushes:    r.GetCommit().GetFlushes(),
			WALSyncs:   r.GetCommit().GetWalSyncs(),
			PathSyncs:  r.GetCommit().GetPathSyncs(),
			Applies:    r.GetCommit().GetApplies(),
			FlushP50US: r.GetCommit().GetFlushP50Us(),
			FlushP99US: r.GetCommit().GetFlushP99Us(),
		},
	}, nil
}

// Events calls fn for every event with from <= id <= to (to 0: the
// newest), then with follow for every new one until to is reached or ctx
// ends (returning ctx's error). fn returning an error ends the stream and
// Events returns that error.
func (c *Client) Events(ctx context.Context, from, to uint64, follow bool, fn func(journal.Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Events(ctx, &controlpb.EventsRequest{From: from, To: to, Follow: follow})
	if err != nil {
		return fromStatus(err)
	}
	for {
		p, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fromStatus(err)
		}
		if err := fn(*EventFromProto(p)); err != nil {
			return err
		}
	}
}

// Fsck runs upkeep.FsckRetain inside the mount, with its retention.
func (c *Client) Fsck(ctx context.Context, repair bool) (upkeep.Report, error) {
	r, err := c.rpc.Fsck(ctx, &controlpb.FsckRequest{Repair: repair})
	if err != nil {
		return upkeep.Report{}, fromStatus(err)
	}
	return reportFromProto(r), nil
}

// GC runs upkeep.GC inside the mount; retain 0 means the mount's retention,
// retainMax 0 upkeep.DefaultRetainMax.
func (c *Client) GC(ctx context.Context, retain, retainMax time.Duration) (upkeep.GCResult, error) {
	if retain < 0 || retainMax < 0 {
		return upkeep.GCResult{}, fmt.Errorf("%w: negative retention %s or retain-max %s", ErrInvalid, retain, retainMax)
	}
	// A mount that reads only whole seconds must not take a sub-second
	// retention for "the default": round up.
	secs := func(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
	r, err := c.rpc.GC(ctx, &controlpb.GCRequest{
		RetainNanos: int64(retain), RetainMaxNanos: int64(retainMax),
		RetainSeconds: secs(retain), RetainMaxSeconds: secs(retainMax),
	})
	if err != nil {
		return upkeep.GCResult{}, fromStatus(err)
	}
	return upkeep.GCResult{Removed: int(r.Removed), Bytes: r.Bytes, Pinned: int(r.Pinned), PinnedBytes: r.PinnedBytes, Horizon: r.Horizon}, nil
}

// Entry is a cmroot entry and the path of its file.
type Entry struct {
	cmroot.Entry
	Path string
}

// Lookup asks the mount where the named cmroot entry lives.
func (c *Client) Lookup(ctx context.Context, name string) (Entry, error) {
	r, err := c.rpc.Lookup(ctx, &controlpb.LookupRequest{Name: name})
	if err != nil {
		return Entry{}, fromStatus(err)
	}
	return Entry{
		Entry: cmroot.Entry{
			Name:      r.Name,
			XXH64:     r.Xxh64,
			Size:      r.Size,
			Preserved: fromUnixNano(r.PreservedUnixNano),
			Refreshed: fromUnixNano(r.RefreshedUnixNano),
		},
		Path: r.Path,
	}, nil
}
