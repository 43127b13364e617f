package procfs

import (
	"os"
	"slices"
	"testing"
)

func TestParseMount(t *testing.T) {
	tests := []struct {
		line string
		want Mount
		ok   bool
	}{
		{`36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`,
			Mount{Major: 98, Minor: 0, Point: "/mnt2", Options: "rw,noatime", FSType: "ext3", Source: "/dev/root"}, true},
		{`46 27 0:43 / /tmp/a\040b rw,nosuid - fuse.cmfs /data/my\040wh rw,user_id=0`,
			Mount{Major: 0, Minor: 43, Point: "/tmp/a b", Options: "rw,nosuid", FSType: "fuse.cmfs", Source: "/data/my wh"}, true},
		{`47 27 0:44 / /a\134b\ rw - tmpfs x\011y rw`, Mount{Minor: 44, Point: `/a\b\`, Options: "rw", FSType: "tmpfs", Source: "x\ty"}, true},
		{`garbage`, Mount{}, false},
		{`36 35 x:y / /m rw - ext4 /dev/sda rw`, Mount{}, false},
		{`36 35 8:1 / /m rw`, Mount{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseMount(tt.line)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseMount(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}

func TestMountsHasRoot(t *testing.T) {
	ms, err := Mounts()
	if err != nil {
		t.Skipf("no /proc/self/mountinfo: %v", err)
	}
	if !slices.ContainsFunc(ms, func(m Mount) bool { return m.Point == "/" }) || !Mounted("/") {
		t.Errorf("mountinfo lists no / in %d mounts", len(ms))
	}
	if Mounted(t.TempDir()) {
		t.Error("a fresh temporary directory is a mountpoint")
	}
}

func TestPIDsSkipsSelf(t *testing.T) {
	self := os.Args[0]
	if got := PIDs(func(args []string) bool { return args[0] == self }); slices.Contains(got, os.Getpid()) {
		t.Errorf("PIDs = %v, holds this process %d", got, os.Getpid())
	}
	if got := PIDs(func([]string) bool { return true }); len(got) == 0 {
		t.Error("PIDs matching everything found no process")
	}
}
