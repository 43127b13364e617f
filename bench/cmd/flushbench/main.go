// Command flushbench measures, on the backing filesystem itself (no FUSE),
// what the commit path's ways of making a change durable cost, so that the
// choice between them rests on numbers taken on this machine:
//
//	go run ./bench/cmd/flushbench [-quick] [-duration 1s] [-reps 3] [-threads 1,8,64]
//
// The operation is the one cmfs journals most: create a file, write 4 KiB
// of new content, and record a ~300-byte event (a journal.Event of an
// INSERT, JSON) naming it. Each of 1, 8 and 64 goroutines does it in a loop
// in its own subdirectory for -duration; where the alternative groups,
// concurrent operations share one commit (a committer takes every pending
// request, commits them together and answers them, as the journal's writer
// does). Every alternative is one row (main.go's alternatives list says
// what each does); per thread count the table shows ops/s, the p50, p99 and
// largest time of one operation (open to close, durable), and operations
// per group commit, and the ratio of ops/s to today's commit path (row b)
// measured side by side.
//
// Two more rows run the syncfs alternative (e) and the per-file one (c)
// while another goroutine writes a large file (-big-mib, 1 GiB) without
// fsync, once per thread count: syncfs flushes every dirty page of the
// filesystem, the others only what they name.
//
// The runs of the alternatives interleave (order rotating from rep to
// rep); every cell starts from a synced filesystem and a fresh directory,
// and its files are removed and synced untimed afterwards. Everything
// lives under .bench/flush at the module root (-dir), removed at the end.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cmfs-project/cmfs/bench"
	"github.com/cmfs-project/cmfs/journal"
	"golang.org/x/sys/unix"
)

type options struct {
	dir      string
	duration time.Duration // per cell
	reps     int
	threads  []int
	big      int64 // the unrelated writer's file
	walSize  int64
	keep     bool
}

func main() { bench.Main("flushbench", parseFlags, run) }

func parseFlags(args []string) (options, error) {
	fl := flag.NewFlagSet("flushbench", flag.ContinueOnError)
	quick := fl.Bool("quick", false, "smoke run: 200ms cells, 1 rep, a 256 MiB unrelated writer")
	duration := fl.Duration("duration", time.Second, "how long each cell (alternative × thread count × rep) runs")
	reps := fl.Int("reps", 3, "runs of each cell (the table pools them)")
	threads := fl.String("threads", "1,8,64", "thread counts, comma-separated")
	big := fl.Int64("big-mib", 1024, "size in MiB of the file the unrelated writer writes without fsync")
	wal := fl.Int64("wal-mib", 64, "size in MiB of the preallocated WAL (written in a circle)")
	dir := fl.String("dir", "", "work directory (default .bench/flush at the module root)")
	keep := fl.Bool("keep", false, "keep the work directory")
	set, err := bench.ParseFlags(fl, args)
	if err != nil {
		return options{}, err
	}
	opts := options{dir: *dir, duration: *duration, reps: *reps, big: *big << 20, walSize: *wal << 20, keep: *keep}
	if *quick {
		if !set["duration"] {
			opts.duration = 200 * time.Millisecond
		}
		if !set["reps"] {
			opts.reps = 1
		}
		if !set["big-mib"] {
			opts.big = 256 << 20
		}
	}
	for _, f := range strings.Split(*threads, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1000 {
			return options{}, fmt.Errorf("-threads %q: want counts from 1 to 1000, comma-separated", *threads)
		}
		opts.threads = append(opts.threads, n)
	}
	if opts.duration <= 0 || opts.reps < 1 || opts.big < 1<<20 || opts.walSize < 1<<20 {
		return options{}, errors.New("want -duration > 0, -reps ≥ 1, -big-mib ≥ 1, -wal-mib ≥ 1")
	}
	return opts, nil
}

// How an alternative makes an operation durable.
type mode int

const (
	none       mode = iota // nothing: the floor
	walOnly                // a: the WAL record, one fdatasync per group
	today                  // b: file + dir flushed by the op, then journal.Log (bbolt) per group
	walAfter               // c: file + dir flushed by the op, then the WAL fdatasync per group
	walBeside              // d: the WAL fdatasync of the group while the op flushes file + dir
	syncfsWAL              // e: WAL record written, then one syncfs per group
	syncfsThen             // f: one syncfs per group, then the WAL record and its fdatasync
	uring                  // g: io_uring; not measured (no library)
)

type alternative struct {
	key, name string
	mode      mode
	loaded    bool // with the unrelated writer running
}

// alternatives are the rows, in the order of the table.
var alternatives = []alternative{
	{key: "0", name: "no flush at all (create+write+close)", mode: none},
	{key: "a", name: "ceiling: WAL fdatasync per group, nothing else", mode: walOnly},
	{key: "b", name: "today: op flushes file + dir, then bbolt commit per group (journal.Log)", mode: today},
	{key: "c", name: "op flushes file + dir, then WAL fdatasync per group", mode: walAfter},
	{key: "d", name: "WAL fdatasync per group concurrent with the op's file + dir flushes", mode: walBeside},
	{key: "e", name: "WAL record written, then syncfs per group", mode: syncfsWAL},
	{key: "f", name: "syncfs per group, then WAL record + fdatasync", mode: syncfsThen},
	{key: "g", name: "io_uring: linked write+fsync SQEs", mode: uring},
	{key: "e+", name: "e, while another goroutine writes BIG without fsync", mode: syncfsWAL, loaded: true},
	{key: "c+", name: "c, while another goroutine writes BIG without fsync", mode: walAfter, loaded: true},
}

// uringNote is the io_uring row's reason: no Go io_uring library is
// served to this project's machines, and the row is not worth hand-written
// ring setup until the syscall-level alternatives say a submission batch
// could win anything (each flush is a device flush either way).
const uringNote = "n/a: no io_uring library served"

// result pools the runs of one cell.
type result struct {
	ops     int
	elapsed time.Duration
	groups  uint64
	lat     bench.Latencies
}

func run(ctx context.Context, stdout, stderr io.Writer, opts options) error {
	root, err := bench.RunDir(opts.dir, "flush")
	if err != nil {
		return err
	}
	defer func() {
		if !opts.keep {
			os.RemoveAll(root)
		}
	}()
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	machine := bench.Describe(root)
	machine.GoFuse, machine.Libfuse = "not used", "not used"
	loadBefore := loadAvg()
	bench.WriteHeader(stdout, "commit path: flush alternatives", machine,
		"work directory: "+root,
		fmt.Sprintf("each cell %v, %d rep(s) pooled (the rows with the unrelated writer: 1), threads %v; 4 KiB files, ~300-byte events; unrelated writer %s",
			opts.duration, opts.reps, opts.threads, bench.Size(opts.big)),
		"load average before: "+loadBefore)
	fmt.Fprintln(stdout)

	logf("preallocating a %s WAL...", bench.Size(opts.walSize))
	w, err := openWAL(filepath.Join(root, "wal"), opts.walSize)
	if err != nil {
		return err
	}
	defer w.f.Close()

	results := map[string]map[int]*result{}
	cell := 0
	for rep := range opts.reps {
		for _, n := range opts.threads {
			k := len(alternatives)
			for j := range k {
				a := alternatives[(j+rep)%k]
				if a.mode == uring || a.loaded && rep > 0 {
					continue // the loaded rows run once: each writes -big-mib
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				cell++
				dir := filepath.Join(root, fmt.Sprintf("cell-%03d", cell))
				t0 := time.Now()
				r, err := runCell(ctx, dir, w, a, n, opts.duration, opts.big)
				overhead := time.Since(t0) - r.elapsed
				if err != nil {
					return fmt.Errorf("%s, %d threads: %w", a.key, n, err)
				}
				if results[a.key] == nil {
					results[a.key] = map[int]*result{}
				}
				acc := results[a.key][n]
				if acc == nil {
					acc = &result{}
					results[a.key][n] = acc
				}
				acc.ops += r.ops
				acc.elapsed += r.elapsed
				acc.groups += r.groups
				acc.lat.Merge(&r.lat)
				logf("[%s, %d threads] run %d: %.0f ops/s, p50 %v, p99 %v, %.1f ops/group (setup and cleanup %v)", a.key, n, rep+1,
					float64(r.ops)/r.elapsed.Seconds(), r.lat.Quantile(0.5).Round(time.Microsecond),
					r.lat.Quantile(0.99).Round(time.Microsecond), opsPerGroup(&r), overhead.Round(time.Millisecond))
			}
		}
	}
	t := &table{threads: opts.threads, results: results, big: bench.Size(opts.big)}
	notes := []string{"load average after: " + loadAvg()}
	return bench.WriteReport(stdout, t, t.legend(), notes, machine)
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

func opsPerGroup(r *result) float64 {
	if r.groups == 0 {
		return 0
	}
	return float64(r.ops) / float64(r.groups)
}

// wal is a preallocated write-ahead file: zero-filled with writes and
// synced before the first cell, so that writing a record overwrites
// allocated, initialised blocks and its fdatasync flushes data only.
// Records go round the file; a benchmark never reads them back.
type wal struct {
	f    *os.File
	fd   int
	size int64
	off  int64 // the committer's: one at a time
}

func openWAL(path string, size int64) (*wal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	zero := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zero)) {
		if _, err := f.Write(zero[:min(int64(len(zero)), size-off)]); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, err
	}
	return &wal{f: f, fd: int(f.Fd()), size: size}, nil
}

// write appends records as one pwrite, wrapping to the start of the file
// when they do not fit before its end.
func (w *wal) write(buf []byte) error {
	if w.off+int64(len(buf)) > w.size {
		w.off = 0
	}
	if _, err := unix.Pwrite(w.fd, buf, w.off); err != nil {
		return fmt.Errorf("wal pwrite: %w", err)
	}
	w.off += int64(len(buf))
	return nil
}

func syncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}

// request is one operation's event on its way through a committer.
type request struct {
	rec  []byte
	done chan error // buffered: the committer never blocks on it
}

// committer group-commits WAL records as the journal's writer groups its
// appends (journal/writer.go), so that the alternatives differ in what a
// commit does, not in how requests are grouped: it takes the first pending
// request, then every other already queued, then lingers up to 200 µs
// while more requests are under way than it holds, and commits them with
// one call.
type committer struct {
	reqs     chan *request
	commit   func(recs [][]byte) error
	groups   atomic.Uint64
	inflight atomic.Int64 // requests submitted and not answered yet
	wg       sync.WaitGroup
}

// lingerMax is the journal's.
const lingerMax = 200 * time.Microsecond

func newCommitter(threads int, commit func(recs [][]byte) error) *committer {
	c := &committer{reqs: make(chan *request, threads), commit: commit}
	c.wg.Add(1)
	go c.run()
	return c
}

func (c *committer) run() {
	defer c.wg.Done()
	var group []*request
	var recs [][]byte
	for first := range c.reqs {
		group, recs = append(group[:0], first), append(recs[:0], first.rec)
	drain:
		for len(group) < 1024 {
			select {
			case r, ok := <-c.reqs:
				if !ok {
					break drain
				}
				group, recs = append(group, r), append(recs, r.rec)
			default:
				break drain
			}
		}
		var start time.Time
	linger:
		for len(group) < 1024 && int64(len(group)) < c.inflight.Load() {
			select {
			case r, ok := <-c.reqs:
				if !ok {
					break linger
				}
				group, recs = append(group, r), append(recs, r.rec)
				continue
			default:
			}
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > lingerMax {
				break
			}
			runtime.Gosched()
		}
		err := c.commit(recs)
		c.groups.Add(1)
		for _, r := range group {
			r.done <- err
			c.inflight.Add(-1)
		}
	}
}

// submit queues e's record; its group's outcome is sent to done. Like
// journal.Log.Append, it counts itself in flight before it encodes.
func (c *committer) submit(e *journal.Event, done chan error) error {
	c.inflight.Add(1)
	rec, err := record(e)
	if err != nil {
		c.inflight.Add(-1)
		return err
	}
	c.reqs <- &request{rec: rec, done: done}
	return nil
}

// stop ends the committer once every queued request is answered.
func (c *committer) stop() {
	close(c.reqs)
	c.wg.Wait()
}

// walCommit is how each WAL alternative commits a group.
func walCommit(m mode, w *wal, fsfd int) func(recs [][]byte) error {
	var buf []byte
	pack := func(recs [][]byte) []byte {
		buf = buf[:0]
		for _, r := range recs {
			buf = append(buf, r...)
		}
		return buf
	}
	switch m {
	case syncfsWAL:
		return func(recs [][]byte) error {
			if err := w.write(pack(recs)); err != nil {
				return err
			}
			return wrap("syncfs", unix.Syncfs(fsfd))
		}
	case syncfsThen:
		return func(recs [][]byte) error {
			if err := unix.Syncfs(fsfd); err != nil {
				return wrap("syncfs", err)
			}
			if err := w.write(pack(recs)); err != nil {
				return err
			}
			return wrap("wal fdatasync", unix.Fdatasync(w.fd))
		}
	default:
		return func(recs [][]byte) error {
			if err := w.write(pack(recs)); err != nil {
				return err
			}
			return wrap("wal fdatasync", unix.Fdatasync(w.fd))
		}
	}
}

func wrap(op string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// record frames an event as a WAL record: length, CRC-32C, JSON.
func record(e *journal.Event) ([]byte, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	rec := make([]byte, 8, 8+len(body))
	binary.LittleEndian.PutUint32(rec, uint32(len(body)))
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(body, castagnoli))
	return append(rec, body...), nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// runCell runs alternative a with n goroutines for d in a fresh directory,
// then removes what it made; both untimed, each followed by a sync.
func runCell(ctx context.Context, dir string, w *wal, a alternative, n int, d time.Duration, big int64) (result, error) {
	defer func() {
		os.RemoveAll(dir)
		syscall.Sync()
	}()
	rel := func(worker int) string { return filepath.Join("sales.db", "orders", fmt.Sprintf("dt=%03d", worker)) }
	dirfds := make([]int, n)
	for i := range dirfds {
		dirfds[i] = -1
	}
	defer func() {
		for _, fd := range dirfds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	for i := range n {
		p := filepath.Join(dir, rel(i))
		if err := os.MkdirAll(p, 0o755); err != nil {
			return result{}, err
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return result{}, err
		}
		dirfds[i] = fd
	}

	var (
		log *journal.Log
		c   *committer
	)
	switch a.mode {
	case today:
		l, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{})
		if err != nil {
			return result{}, err
		}
		log = l
		defer log.Close()
	case walOnly, walAfter, walBeside, syncfsWAL, syncfsThen:
		c = newCommitter(n, walCommit(a.mode, w, w.fd))
		defer c.stop()
	}
	syscall.Sync()

	var bg *writer
	if a.loaded {
		bg = startWriter(filepath.Join(dir, "big"), big)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		stopped  atomic.Bool
		ops      = make([]int, n)
		lat      = make([]bench.Latencies, n)
	)
	for i := range lat {
		lat[i].Alloc()
	}
	start := time.Now()
	deadline := start.Add(d)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &op{mode: a.mode, dir: filepath.Join(dir, rel(i)), rel: rel(i), dirfd: dirfds[i], log: log, c: c,
				buf: content(uint64(i)), done: make(chan error, 1)}
			for k := 0; ; k++ {
				if stopped.Load() || ctx.Err() != nil {
					return
				}
				if time.Now().After(deadline) && (bg == nil || bg.finished()) {
					return
				}
				t0 := time.Now()
				if err := o.do(ctx, k); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					stopped.Store(true)
					return
				}
				lat[i].Record(time.Since(t0))
				ops[i]++
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if bg != nil {
		if err := bg.wait(); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return result{}, firstErr
	}
	r := result{elapsed: elapsed}
	for i := range n {
		r.ops += ops[i]
		r.lat.Merge(&lat[i])
	}
	switch {
	case log != nil:
		r.groups = log.Stats().Commits
	case c != nil:
		r.groups = c.groups.Load() // every request is answered, so counted
	}
	return r, nil
}

// content returns a 4 KiB buffer of pseudo-random bytes; each op stamps
// its number into it, so that no two files hold the same content.
func content(seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x666c7573))
	b := make([]byte, 4096)
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}

// op is one goroutine's operation: create, write 4 KiB, make it and its
// event durable as the mode says, close.
type op struct {
	mode  mode
	dir   string // absolute
	rel   string // as the event names it
	dirfd int
	log   *journal.Log
	c     *committer
	buf   []byte
	done  chan error
}

func (o *op) do(ctx context.Context, k int) error {
	binary.LittleEndian.PutUint64(o.buf, uint64(k))
	name := fmt.Sprintf("part-%07d.parquet", k)
	p := filepath.Join(o.dir, name)
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return &os.PathError{Op: "create", Path: p, Err: err}
	}
	err = o.durable(ctx, fd, k, name)
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = &os.PathError{Op: "close", Path: p, Err: cerr}
	}
	return err
}

func (o *op) durable(ctx context.Context, fd, k int, name string) error {
	if _, err := unix.Write(fd, o.buf); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if o.mode == none {
		return nil
	}
	e := &journal.Event{Type: journal.Insert, Path: o.rel + "/" + name, Files: []journal.File{{
		Path: o.rel + "/" + name, Size: int64(len(o.buf)), XXH64: journal.Sum(o.buf),
	}}}
	e.Stamp()
	switch o.mode {
	case today:
		if err := o.flush(fd); err != nil {
			return err
		}
		return o.log.Append(ctx, e)
	case walAfter:
		if err := o.flush(fd); err != nil {
			return err
		}
		return o.commit(e)
	case walBeside:
		if err := o.c.submit(e, o.done); err != nil {
			return err
		}
		ferr := o.flush(fd)
		return errors.Join(<-o.done, ferr)
	default: // walOnly, syncfsWAL, syncfsThen: the committer does it all
		return o.commit(e)
	}
}

// commit sends e's record to the committer and waits for its group.
func (o *op) commit(e *journal.Event) error {
	if err := o.c.submit(e, o.done); err != nil {
		return err
	}
	return <-o.done
}

// flush does what protect's flush does for a created file: fdatasync of
// the file and fsync of its directory, at the same time.
func (o *op) flush(fd int) error {
	dirErr := make(chan error, 1)
	go func() { dirErr <- wrap("fsync dir", unix.Fsync(o.dirfd)) }()
	err := wrap("fdatasync", unix.Fdatasync(fd))
	return errors.Join(err, <-dirErr)
}

// writer writes a file of a given size in 1 MiB writes, without fsync:
// dirty data of the filesystem that no event names.
type writer struct {
	done chan struct{}
	err  error
	over atomic.Bool
}

func startWriter(path string, size int64) *writer {
	w := &writer{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer w.over.Store(true)
		f, err := os.Create(path)
		if err != nil {
			w.err = err
			return
		}
		buf := content(^uint64(0))
		buf = append(buf, make([]byte, (1<<20)-len(buf))...)
		for off := int64(0); off < size; off += int64(len(buf)) {
			binary.LittleEndian.PutUint64(buf, uint64(off))
			if _, err := f.Write(buf); err != nil {
				w.err = err
				break
			}
		}
		if err := f.Close(); w.err == nil {
			w.err = err
		}
	}()
	return w
}

func (w *writer) finished() bool { return w.over.Load() }

func (w *writer) wait() error {
	<-w.done
	return w.err
}

// table is the result: one row per alternative, per thread count ops/s,
// p50 and p99, and the ratio against today's.
type table struct {
	threads []int
	results map[string]map[int]*result
	big     string
}

func (t *table) header() []string {
	h := []string{"alternative"}
	for _, n := range t.threads {
		h = append(h, fmt.Sprintf("%d thr ops/s", n), "p50 / p99 / max µs")
	}
	return append(h, "ops/s ÷ today", "ops/group")
}

func (t *table) cells(a alternative) []string {
	name := a.key + ". " + strings.ReplaceAll(a.name, "BIG", t.big)
	c := []string{name}
	if a.mode == uring {
		for i := range t.threads {
			if i == 0 {
				c = append(c, uringNote, "—")
			} else {
				c = append(c, "n/a", "—")
			}
		}
		return append(c, "—", "—")
	}
	var ratios, groups []string
	for _, n := range t.threads {
		r := t.results[a.key][n]
		if r == nil || r.ops == 0 {
			c = append(c, "n/a", "—")
			ratios, groups = append(ratios, "—"), append(groups, "—")
			continue
		}
		ops := float64(r.ops) / r.elapsed.Seconds()
		c = append(c, fmt.Sprintf("%.0f", ops), micros(r.lat.Quantile(0.5))+" / "+micros(r.lat.Quantile(0.99))+" / "+micros(r.lat.Quantile(1)))
		if b := t.results["b"][n]; b != nil && b.ops > 0 {
			ratios = append(ratios, fmt.Sprintf("%.2f", ops/(float64(b.ops)/b.elapsed.Seconds())))
		} else {
			ratios = append(ratios, "—")
		}
		if g := opsPerGroup(r); g > 0 {
			groups = append(groups, fmt.Sprintf("%.1f", g))
		} else {
			groups = append(groups, "—")
		}
	}
	return append(c, strings.Join(ratios, " / "), strings.Join(groups, " / "))
}

func micros(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	if us < 100 {
		return fmt.Sprintf("%.3g", us)
	}
	return fmt.Sprintf("%.0f", us)
}

func (t *table) WriteText(w io.Writer) error {
	return bench.WriteText(w, t.header(), t.allCells())
}

func (t *table) WriteMarkdown(w io.Writer) error {
	return bench.WriteMarkdown(w, t.header(), t.allCells(), 0)
}

// allCells is every alternative's row of cells.
func (t *table) allCells() [][]string {
	var rows [][]string
	for _, a := range alternatives {
		rows = append(rows, t.cells(a))
	}
	return rows
}

func (t *table) legend() string {
	return "Per operation: create a 4 KiB file with new content in the thread's own directory and make it and a ~300-byte event " +
		"naming it durable as the row says, then close; p50 / p99 / max from open to close. ops/s ÷ today: the row's ops/s over row b's " +
		"at the same thread count, measured side by side (runs interleaved); ops/group: operations per group commit (1 / 8 / 64 " +
		"threads or as -threads says). \"The op flushes\": the operation's own goroutine fdatasyncs its file and fsyncs its " +
		"directory at the same time (as protect's flush does), concurrently with the other threads'; \"per group\": one committer " +
		"takes every request pending and commits them together."
}
