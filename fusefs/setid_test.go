package fusefs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cmfs-project/cmfs/internal/at"
)

func TestClearSetID(t *testing.T) {
	for _, tc := range []struct {
		mode, want uint32
	}{
		{0o4755, 0o755},
		{0o2775, 0o775},
		{0o6777, 0o777},
		{0o2765, 0o2765}, // the group may not execute: set-group-ID stays
		{0o6745, 0o2745},
		{0o1777, 0o1777}, // sticky is not a set-ID bit
		{0o644, 0o644},
	} {
		dir := t.TempDir()
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Chmod(p, tc.mode); err != nil {
			t.Fatal(err)
		}
		if got := setIDClearable(syscall.S_IFREG | tc.mode); got != (tc.want != tc.mode) {
			t.Errorf("setIDClearable(%04o) = %v", tc.mode, got)
		}
		tree, err := at.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		err = clearSetIDAt(tree, "f")
		tree.Close()
		if err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if got := st.Mode & 0o7777; got != tc.want {
			t.Errorf("clearSetID of %04o: %04o, want %04o", tc.mode, got, tc.want)
		}
	}
	if setIDClearable(syscall.S_IFDIR | 0o2775) {
		t.Errorf("a set-group-ID directory is clearable")
	}
}
