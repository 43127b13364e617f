package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/cmfs-project/cmfs/bench"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/peer"
)

// node is one `replicad serve` process with its volume.
type node struct {
	name    string
	addr    string
	volume  string
	extra   []string // serve's flags beyond --listen, --node-id, --volume
	metrics string   // the --metrics address, if it has one
	p       *bench.Proc
	client  *peer.Client // for polling; the measured work goes through the CLI
}

// checkCLI makes sure the binary has the container commands.
func (r *runner) checkCLI(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, r.replicad, "container", "replicate", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--to") {
		return fmt.Errorf("%s has no `container replicate --to` (%v: %s)", r.replicad, err, bench.FirstLines(string(out), 2))
	}
	return nil
}

// serve starts `replicad serve` for node name on a free loopback port with
// one volume and waits until it answers.
func (r *runner) serve(ctx context.Context, name, volume string, extra ...string) (*node, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	return r.serveAt(ctx, name, addr, volume, extra...)
}

// serveAt is serve on addr: a node started again keeps its address, which
// its peers and the coordinator know it by.
func (r *runner) serveAt(ctx context.Context, name, addr, volume string, extra ...string) (*node, error) {
	if err := os.MkdirAll(volume, 0o755); err != nil {
		return nil, err
	}
	argv := append([]string{r.replicad, "serve", "--listen", addr, "--node-id", name, "--volume", volume}, extra...)
	p, err := r.procs.Start("serve-"+name, argv...)
	if err != nil {
		return nil, err
	}
	client, err := peer.Dial(ctx, addr, peer.WithToken(r.token))
	if err != nil {
		p.Stop()
		return nil, err
	}
	n := &node{name: name, addr: addr, volume: volume, extra: extra, p: p, client: client}
	for i, f := range extra {
		if f == "--metrics" && i+1 < len(extra) {
			n.metrics = extra[i+1]
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := client.List(ctx)
		if err == nil {
			return n, nil
		}
		select {
		case <-p.Done():
			client.Close()
			return nil, fmt.Errorf("replicad serve %s exited: %s", name, p.Exited())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			n.stop()
			return nil, fmt.Errorf("replicad serve %s on %s not answering after 30s: %w", name, addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *node) pid() int { return n.p.Cmd.Process.Pid }

func (n *node) stop() {
	n.client.Close()
	n.p.Stop()
}

// kill9 ends the node with SIGKILL, as a crash would, and waits until it
// is gone.
func (n *node) kill9() {
	n.client.Close()
	n.p.Cmd.Process.Kill()
	<-n.p.Done()
}

// alive says whether the node's process still runs.
func (n *node) alive() bool {
	select {
	case <-n.p.Done():
		return false
	default:
		return true
	}
}

// fill puts files into n's open container with `replicad container put`
// (and putFlags) and closes it with `replicad container close`, and
// returns it.
func (r *runner) fill(ctx context.Context, n *node, files []string, size int64, putFlags ...string) (container.Descriptor, error) {
	before, err := n.client.List(ctx)
	if err != nil {
		return container.Descriptor{}, err
	}
	if _, err := r.cli(ctx, append(append([]string{"container", "put", "--server", n.addr}, putFlags...), files...)...); err != nil {
		return container.Descriptor{}, err
	}
	after, err := n.client.List(ctx)
	if err != nil {
		return container.Descriptor{}, err
	}
	var open []container.Descriptor
	for _, d := range after {
		if d.State == container.Open && !has(before, d.ID) {
			open = append(open, d)
		}
	}
	if len(open) != 1 {
		return container.Descriptor{}, fmt.Errorf("after put: %d new open containers on %s, want 1 (the put must fit one container)", len(open), n.name)
	}
	id := strconv.FormatUint(open[0].ID, 10)
	if _, err := r.cli(ctx, "container", "close", "--server", n.addr, id); err != nil {
		return container.Descriptor{}, err
	}
	d, err := describe(ctx, n, open[0].ID)
	if err == nil && (d.State != container.Closed || d.Bytes != size || d.Blocks != int64(len(files))) {
		err = fmt.Errorf("container %s on %s: %s, %d bytes, %d blocks; want CLOSED, %d bytes, %d blocks", id, n.name, d.State, d.Bytes, d.Blocks, size, len(files))
	}
	return d, err
}

func has(ds []container.Descriptor, id uint64) bool {
	for _, d := range ds {
		if d.ID == id {
			return true
		}
	}
	return false
}

// describe returns container id's descriptor on n.
func describe(ctx context.Context, n *node, id uint64) (container.Descriptor, error) {
	ds, err := n.client.List(ctx)
	if err != nil {
		return container.Descriptor{}, err
	}
	for _, d := range ds {
		if d.ID == id {
			return d, nil
		}
	}
	return container.Descriptor{}, fmt.Errorf("container %d not on %s", id, n.name)
}

// replicate runs `replicad container replicate` of id from src to dst and
// returns how long it took, and what it printed.
func (r *runner) replicate(ctx context.Context, src, dst *node, id uint64, comp string) (time.Duration, string, error) {
	args := []string{"container", "replicate", "--server", src.addr, strconv.FormatUint(id, 10), "--to", dst.addr}
	if comp != "" {
		args = append(args, "--compression", comp)
	}
	start := time.Now()
	out, err := r.cli(ctx, args...)
	return time.Since(start), out, err
}

// waitScanned polls dst until container id is CLOSED (its scan passed)
// and checks it holds size bytes.
func waitScanned(ctx context.Context, dst *node, id uint64, size int64) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		d, err := describe(ctx, dst, id)
		switch {
		case err != nil:
			return err
		case d.State == container.Closed && d.Bytes != size:
			return fmt.Errorf("container %d on %s: %d bytes, want %d", id, dst.name, d.Bytes, size)
		case d.State == container.Closed:
			return nil
		case d.State != container.Recovering:
			return fmt.Errorf("container %d on %s: %s (%s)", id, dst.name, d.State, d.Reason)
		case time.Now().After(deadline):
			return fmt.Errorf("container %d on %s: still %s after 10 minutes", id, dst.name, d.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

// cli runs a replicad command and returns its standard output.
func (r *runner) cli(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, r.replicad, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("replicad %s: %w: %s", strings.Join(args[:2], " "), err, bench.FirstLines(stderr.String(), 3))
	}
	return string(out), nil
}

var errNoRsync = errors.New("rsync is not installed (make bench-deps installs it)")
