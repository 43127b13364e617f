package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/statedir"
)

// TestConfigMount mounts with a config file ($CMFS_CONFIG) and the
// environment instead of flags: --daemon, the state directory, cmroot,
// sync and an exclude from the file, the retention from
// $CMFS_MOUNT_RETAIN over the file's. The background process inherits
// both, yet mounts with what the parent settled on and does not fork
// again; status (its --state from the file, named by --config) and the
// mount record show what took effect.
func TestConfigMount(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	m := &mounted{
		Backing: filepath.Join(dir, "backing"),
		Mnt:     filepath.Join(dir, "mnt"),
		State:   filepath.Join(dir, "state"),
		CMRoot:  filepath.Join(dir, "state", "kept"),
	}
	for _, d := range []string{m.Backing, m.Mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "cmfs.yaml")
	text := "mount:\n" +
		"  daemon: true\n" +
		"  state: " + m.State + "\n" +
		"  cmroot: " + m.CMRoot + "\n" +
		"  retain: 72h\n" +
		"  sync: interval:20ms\n" +
		"  exclude: [\"_tmp*\"]\n" +
		"status:\n" +
		"  state: " + m.State + "\n"
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := cmfs(t, "config", "check", file); res.Code != 0 {
		t.Fatalf("config check: %v", res)
	}

	live.Store(m.Mnt, true)
	t.Cleanup(func() { m.unmountAndCheck(t) })
	res := runToolEnv(t, 60*time.Second, []string{"CMFS_CONFIG=" + file, "CMFS_MOUNT_RETAIN=96h"}, cmfsBin, "mount", m.Backing, m.Mnt)
	if res.Code != 0 {
		t.Fatalf("CMFS_CONFIG=%s cmfs mount: %v", file, res)
	}
	// --daemon from the file: the command returned with the mount up.
	if !isMounted(m.Mnt) {
		t.Fatalf("%s not mounted after cmfs mount returned", m.Mnt)
	}
	if pids := daemonPIDs(m.Mnt); len(pids) != 1 {
		t.Errorf("daemons serving %s: %v, want one", m.Mnt, pids)
	}

	for _, name := range []string{"kept-file", "_tmp-file"} {
		if err := os.WriteFile(m.path(name), []byte("content of "+name), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(m.path(name)); err != nil {
			t.Fatal(err)
		}
	}
	res = cmfs(t, "--config", file, "status")
	if res.Code != 0 {
		t.Fatalf("cmfs --config %s status: %v", file, res)
	}
	for _, want := range []string{
		"mounted:    yes, at " + m.Mnt,
		"state:      " + m.State,
		"cmroot:     " + m.CMRoot,
		"sync:       interval:20ms",
		"cm entries: 1 ", // kept-file; _tmp-file was excluded
	} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("status does not say %q:\n%s", want, res.Stdout)
		}
	}
	rec, err := statedir.ReadRecord(m.State)
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.Retention(0); got != 96*time.Hour {
		t.Errorf("mount record's retention = %s, want 96h (the environment's, over the file's 72h)", got)
	}

}
