package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// What the container benchmark (bench/cmd/containerbench) needs besides
// the tables: its data sets, a loopback TCP pipe for the tar baseline, and
// the peak memory of the processes it watches.

// WriteRandomFiles writes n files of size bytes of incompressible data
// (each distinct) into dir as part-NNNNN and returns their paths.
func WriteRandomFiles(dir string, n, size int) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	paths := make([]string, n)
	for i := range n {
		paths[i] = filepath.Join(dir, fmt.Sprintf("part-%05d", i))
		if err := os.WriteFile(paths[i], Content(size, 0x636f6e74, i), 0o644); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// WriteJSONFiles writes n files of size bytes of JSON lines (an event log
// of web shop clicks: ids, times, users, pages, amounts drawn at random
// from realistic ranges) into dir as events-NNNNN.json and returns their
// paths. The rows compress like real logs do — a few times, not a
// thousand — because every row differs.
func WriteJSONFiles(dir string, n, size int) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	paths := make([]string, n)
	for i := range n {
		paths[i] = filepath.Join(dir, fmt.Sprintf("events-%05d.json", i))
		if err := os.WriteFile(paths[i], JSONRows(size, uint64(i)), 0o644); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

var (
	jsonEvents    = []string{"view", "click", "add_to_cart", "remove_from_cart", "checkout", "search", "login"}
	jsonPages     = []string{"/", "/search", "/cart", "/checkout", "/account", "/products/", "/category/"}
	jsonCountries = []string{"DE", "FR", "US", "GB", "NL", "ES", "IT", "PL", "SE", "JP", "BR", "IN"}
	jsonAgents    = []string{"Mozilla/5.0 (X11; Linux x86_64)", "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4)",
		"Mozilla/5.0 (Windows NT 10.0; Win64; x64)", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X)"}
)

// JSONRows returns exactly size bytes of JSON lines drawn from seed (the
// last line cut short where size ends).
func JSONRows(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x6a736f6e))
	b := make([]byte, 0, size+512)
	ts := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(seed) * time.Hour)
	for id := seed << 32; len(b) < size; id++ {
		ts = ts.Add(time.Duration(r.IntN(2000)) * time.Millisecond)
		page := jsonPages[r.IntN(len(jsonPages))]
		if strings.HasSuffix(page, "/") && page != "/" {
			page += strconv.Itoa(r.IntN(50000))
		}
		b = append(b, `{"id":`...)
		b = strconv.AppendUint(b, id, 10)
		b = append(b, `,"ts":"`...)
		b = ts.AppendFormat(b, time.RFC3339Nano)
		b = append(b, `","user":"user_`...)
		b = strconv.AppendInt(b, int64(r.IntN(200000)), 10)
		b = append(b, `","session":"`...)
		b = strconv.AppendUint(b, r.Uint64()>>16, 16)
		b = append(b, `","event":"`...)
		b = append(b, jsonEvents[r.IntN(len(jsonEvents))]...)
		b = append(b, `","page":"`...)
		b = append(b, page...)
		b = append(b, `","amount":`...)
		b = strconv.AppendFloat(b, float64(r.IntN(100000))/100, 'f', 2, 64)
		b = append(b, `,"country":"`...)
		b = append(b, jsonCountries[r.IntN(len(jsonCountries))]...)
		b = append(b, `","agent":"`...)
		b = append(b, jsonAgents[r.IntN(len(jsonAgents))]...)
		b = append(b, "\"}\n"...)
	}
	return b[:size]
}

// LoopbackPipe copies r to w through a TCP connection over the loopback
// interface, as two processes on one host talking over the network would:
// r is read into the connection's one end, w written from the other. It
// returns the bytes w got, once r is at its end and everything reached w,
// or the first error.
func LoopbackPipe(ctx context.Context, w io.Writer, r io.Reader) (int64, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer lis.Close()
	var d net.Dialer
	out, err := d.DialContext(ctx, "tcp", lis.Addr().String())
	if err != nil {
		return 0, err
	}
	defer out.Close()
	in, err := lis.Accept()
	if err != nil {
		return 0, err
	}
	defer in.Close()
	stop := context.AfterFunc(ctx, func() {
		out.Close()
		in.Close()
	})
	defer stop()

	var wg sync.WaitGroup
	var sendErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		// 1 MiB reads, as replicad's messages are.
		_, sendErr = io.CopyBuffer(out, onlyReader{r}, make([]byte, 1<<20))
		if sendErr == nil {
			sendErr = out.(*net.TCPConn).CloseWrite()
		} else {
			out.Close() // the receiver must not wait for more
		}
	}()
	n, recvErr := io.CopyBuffer(onlyWriter{w}, in, make([]byte, 1<<20))
	if recvErr != nil {
		in.Close() // the sender must not block on a full window
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return n, err
	}
	return n, errors.Join(sendErr, recvErr)
}

// onlyReader and onlyWriter hide ReadFrom and WriteTo, so that the copies
// go through the buffer given (both ends of the relay alike).
type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }

// ResetPeakRSS resets the peak resident set size (VmHWM) of process pid
// to its current RSS (Linux ≥ 4.0, as root or the process's owner).
func ResetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5\n"), 0)
}

// ProcStatus returns a field of /proc/PID/status given in kB (VmRSS,
// VmHWM, ...), in bytes.
func ProcStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, field, err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// RSSSampler records the highest VmRSS of a set of processes, sampled at
// a fixed interval, until Stop.
type RSSSampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	peak   map[int]int64
	err    error
}

// SampleRSS starts sampling pids every interval.
func SampleRSS(pids []int, interval time.Duration) *RSSSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &RSSSampler{cancel: cancel, done: make(chan struct{}), peak: map[int]int64{}}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			s.sample(pids)
			select {
			case <-ctx.Done():
				s.sample(pids)
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *RSSSampler) sample(pids []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pid := range pids {
		rss, err := ProcStatus(pid, "VmRSS")
		if err != nil {
			if s.err == nil {
				s.err = err
			}
			continue
		}
		s.peak[pid] = max(s.peak[pid], rss)
	}
}

// Stop ends the sampling and returns the highest VmRSS seen of each
// process, in bytes, and the first error reading one (a process that
// exited).
func (s *RSSSampler) Stop() (map[int]int64, error) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak, s.err
}

// DiskWritten returns the bytes written so far to the block device that
// holds dir (sectors written, /sys/dev/block/MAJ:MIN/stat), by every
// process and the kernel's writeback alike: compare two readings taken
// around a run on an otherwise quiet disk.
func DiskWritten(dir string) (int64, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", dir, err)
	}
	path := fmt.Sprintf("/sys/dev/block/%d:%d/stat", unix.Major(st.Dev), unix.Minor(st.Dev))
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 7 {
		return 0, fmt.Errorf("%s: %d fields", path, len(f))
	}
	sectors, err := strconv.ParseInt(f[6], 10, 64) // always 512-byte units
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return sectors * 512, nil
}
