package statedir

import (
	"os"
	"path/filepath"
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
