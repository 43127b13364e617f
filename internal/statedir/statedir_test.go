package statedir

import (
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestRecord(t *testing.T) {
	state := t.TempDir()
	got, err := ReadRecord(state)
	if err != nil || got != (Record{}) {
		t.Fatalf("ReadRecord of a never-mounted state = %+v, %v; want the zero Record", got, err)
	}
	want := Record{Backing: "/b", Mountpoint: "/m", CMRoot: "/b/.cmfs/cmroot", Retain: "2h0m0s", PID: 42}
	if err := WriteRecord(state, want); err != nil {
		t.Fatal(err)
	}
	if got, err = ReadRecord(state); err != nil || got != want {
		t.Fatalf("ReadRecord = %+v, %v; want %+v", got, err, want)
	}
	fi, err := os.Stat(filepath.Join(state, RecordFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("record file: %v, %v; want mode 0600", fi, err)
	}
	if err := os.WriteFile(filepath.Join(state, RecordFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRecord(state); err == nil {
		t.Error("ReadRecord of a damaged record: no error")
	}
}

func TestRetention(t *testing.T) {
	const def = 24 * time.Hour
	for _, tc := range []struct {
		retain string
		want   time.Duration
	}{
		{"", def},
		{"soon", def},
		{"-1h", def},
		{"0s", def},
		{"90m", 90 * time.Minute},
	} {
		t.Run(tc.retain, func(t *testing.T) {
			if got := (Record{Retain: tc.retain}).Retention(def); got != tc.want {
				t.Errorf("Retention(%q) = %s, want %s", tc.retain, got, tc.want)
			}
		})
	}
}

func TestLostWrites(t *testing.T) {
	const boot = "2010cd47-4cd7-4344-8b25-e764df05327f"
	for _, tc := range []struct {
		name string
		r    Record
		boot string
		want bool
	}{
		{"never mounted", Record{}, boot, false},
		{"stopped cleanly", Record{Backing: "/b", BootID: "other", Clean: true}, boot, false},
		{"killed, same boot", Record{Backing: "/b", BootID: boot}, boot, false},
		{"killed, rebooted since", Record{Backing: "/b", BootID: "other"}, boot, true},
		{"record without a boot id", Record{Backing: "/b"}, boot, true},
		{"boot id unknown", Record{Backing: "/b", BootID: boot}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.LostWrites(tc.boot); got != tc.want {
				t.Errorf("%+v.LostWrites(%q) = %v, want %v", tc.r, tc.boot, got, tc.want)
			}
		})
	}
}

func TestMarkClean(t *testing.T) {
	state := t.TempDir()
	r := Record{Backing: "/b", PID: 7, BootID: "x", Started: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err := WriteRecord(state, r); err != nil {
		t.Fatal(err)
	}
	if err := MarkClean(state); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRecord(state)
	r.Clean = true
	if err != nil || got != r {
		t.Fatalf("after MarkClean: %+v, %v; want %+v", got, err, r)
	}
}

func TestBootID(t *testing.T) {
	if _, err := os.Stat(BootIDFile); err == nil {
		if id := BootID(); len(id) != 36 {
			t.Errorf("BootID() = %q, want a UUID from %s", id, BootIDFile)
		}
	}
	t.Setenv(TestBootIDEnv, "simulated-reboot")
	if id := BootID(); id != "simulated-reboot" {
		t.Errorf("BootID() with %s set = %q", TestBootIDEnv, id)
	}
}

// TestGlobMatchesPathMatch: the direct comparisons of a name or a prefix
// agree with path.Match on every pattern and name tried.
func TestGlobMatchesPathMatch(t *testing.T) {
	patterns := append([]string{"", "*", "a*", "a*b", "_SUCCESS", "x?", "[ab]c", `a\*`, "**", "a*", "part-*"}, DefaultExcludes...)
	names := []string{"", "a", "ab", "a*", "abc", "b", "_SUCCESS", "_SUCCESSX", "x", "xy", "ac", "bc", "part-0", "part", ".hive-staging_1", ".hive-stagin", "_started_1", "_temporary"}
	direct := 0
	for _, p := range patterns {
		if _, _, ok := directGlob(p); ok {
			direct++
		}
		for _, n := range names {
			want, err := path.Match(p, n)
			if err != nil {
				t.Fatalf("path.Match(%q): %v", p, err)
			}
			if got := matchGlob(p, n); got != want {
				t.Errorf("glob %q on %q = %v, path.Match says %v", p, n, got, want)
			}
		}
	}
	if direct < len(DefaultExcludes) {
		t.Errorf("%d patterns compared directly, want at least the %d default ones", direct, len(DefaultExcludes))
	}
}

// TestRecordOnFullDisk: a mount writes its record as it starts and as it
// stops; on a file system filled since the last write, both must work.
func TestRecordOnFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: mounting a tmpfs needs uid 0")
	}
	state := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", state).CombinedOutput(); err != nil {
		t.Fatalf("mount -t tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", state).Run() })

	r := Record{Backing: "/b", PID: 1, BootID: "x"}
	if err := WriteRecord(state, r); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, RecordRoomFile)); err != nil {
		t.Fatalf("no room kept for the next record: %v", err)
	}
	f, err := os.Create(filepath.Join(state, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for _, err = f.Write(make([]byte, 4096)); err == nil; _, err = f.Write(make([]byte, 512)) {
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v", err)
	}
	if err := os.WriteFile(filepath.Join(state, "probe"), []byte("x"), 0o600); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("the tmpfs is not full: a new file took a byte (%v)", err)
	}

	for pid := 2; pid <= 4; pid++ { // a start, a stop, the next start
		r.PID = pid
		if err := WriteRecord(state, r); err != nil {
			t.Fatalf("record %d on a full file system: %v", pid, err)
		}
		if got, err := ReadRecord(state); err != nil || got != r {
			t.Fatalf("record %d read back as %+v, %v", pid, got, err)
		}
	}
	if err := MarkClean(state); err != nil {
		t.Fatalf("MarkClean on a full file system: %v", err)
	}
}
