package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	base := func(rest ...string) []string {
		return append([]string{"mount", "--daemon", "--ready-timeout", "0"}, rest...)
	}
	for _, tt := range []struct {
		name string
		args []string
		want []string // cmfs's arguments
		// fake, verbose: the flags seen.
		fake, verbose bool
		warn          string // a warning line contains it
		err           string // parse fails with an error containing it
	}{
		{name: "no options",
			args: []string{"/b", "/m"},
			want: base("--", "/b", "/m")},
		{name: "as mount(8) passes an fstab line",
			args: []string{"/b", "/m", "-o", "rw,nosuid,nodev,state=/s,retain=2h,allow_other,nofail,_netdev"},
			want: base("--state", "/s", "--retain", "2h", "-o", "nosuid,nodev,allow_other", "--", "/b", "/m")},
		{name: "every cmfs option",
			args: []string{"/b", "/m", "-o", "config=/etc/cmfs/cmfs.yaml,state=/s,cmroot=/c,retain=72h,exclude=_tmp*,exclude=.staging*,no_default_excludes,journal_reserve=128MiB,sync=interval:20ms,log_format=json,log_level=debug,debug,ready_timeout=30s"},
			want: []string{"mount", "--daemon", "--ready-timeout", "30s",
				"--config", "/etc/cmfs/cmfs.yaml", "--state", "/s", "--cmroot", "/c", "--retain", "72h", "--exclude", "_tmp*", "--exclude", ".staging*",
				"--no-default-excludes", "--journal-reserve", "128MiB", "--sync", "interval:20ms",
				"--log-format", "json", "--log-level", "debug", "--debug", "--", "/b", "/m"}},
		{name: "every kernel option",
			args: []string{"/b", "/m", "-o", "allow_other,default_permissions,nosuid,nodev,noexec,suid,dev,exec"},
			want: base("-o", "allow_other,default_permissions,nosuid,nodev,noexec,suid,dev,exec", "--", "/b", "/m")},
		{name: "fstab's own options are ignored",
			args: []string{"/b", "/m", "-o", "defaults,rw,async,auto,noauto,nofail,_netdev,user,users,nouser,owner,group,comment=x,x-systemd.automount,x-systemd.mount-timeout=5min,,"},
			want: base("--", "/b", "/m")},
		{name: "flags anywhere, -o repeated and glued",
			args: []string{"-v", "/b", "-oretain=1h", "/m", "-o", "allow_other", "-n", "-t", "fuse.cmfs"},
			want: base("--retain", "1h", "-o", "allow_other", "--", "/b", "/m"), verbose: true},
		{name: "flags together",
			args: []string{"/b", "/m", "-fnv"},
			want: base("--", "/b", "/m"), fake: true, verbose: true},
		{name: "a quoted value with a comma",
			args: []string{"/b", "/m", "-o", `exclude="a,b",retain=1h`},
			want: base("--exclude", "a,b", "--retain", "1h", "--", "/b", "/m")},
		{name: "sync alone is the VFS option, sync= is cmfs's",
			args: []string{"/b", "/m", "-o", "sync=always"},
			want: base("--sync", "always", "--", "/b", "/m")},
		{name: "sloppy warns",
			args: []string{"/b", "/m", "-s", "-o", "bogus,retain=1h,noatime"},
			want: base("--retain", "1h", "--", "/b", "/m"), warn: `unknown option "bogus"`},

		{name: "unknown option", args: []string{"/b", "/m", "-o", "retain=1h,bogus=3"}, err: `unknown option "bogus=3"`},
		{name: "ro", args: []string{"/b", "/m", "-o", "ro"}, err: "option ro: cmfs mounts read-write only"},
		{name: "bare sync", args: []string{"/b", "/m", "-o", "sync"}, err: "option sync: a synchronous mount"},
		{name: "noatime", args: []string{"/b", "/m", "-o", "noatime"}, err: "access times are the backing file system's"},
		{name: "valued option without a value", args: []string{"/b", "/m", "-o", "retain"}, err: "option retain needs a value"},
		{name: "empty value", args: []string{"/b", "/m", "-o", "state="}, err: "option state= needs a value"},
		{name: "switch with a value", args: []string{"/b", "/m", "-o", "allow_other=1"}, err: "option allow_other takes no value"},
		{name: "unterminated quote", args: []string{"/b", "/m", "-o", `exclude="a`}, err: "unterminated quote"},
		{name: "another type", args: []string{"/b", "/m", "-t", "fuse.sshfs"}, err: "fuse.cmfs only"},
		{name: "namespace", args: []string{"/b", "/m", "-N", "/proc/1/ns/mnt"}, err: "another mount namespace"},
		{name: "unknown flag", args: []string{"/b", "/m", "-x"}, err: "unknown flag -x"},
		{name: "-o without a value", args: []string{"/b", "/m", "-o"}, err: "-o needs a value"},
		{name: "one argument", args: []string{"/b"}, err: "need BACKING and MOUNTPOINT, got 1"},
		{name: "three arguments", args: []string{"/b", "/m", "/x"}, err: "got 3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := parse(tt.args)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parse(%q) = %v, want an error containing %q", tt.args, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q): %v", tt.args, err)
			}
			if got := inv.cmfsArgs(); !slices.Equal(got, tt.want) {
				t.Errorf("cmfs %q\nwant %q", got, tt.want)
			}
			if inv.fake != tt.fake || inv.verbose != tt.verbose {
				t.Errorf("fake, verbose = %v, %v; want %v, %v", inv.fake, inv.verbose, tt.fake, tt.verbose)
			}
			if w := strings.Join(inv.warnings, "\n"); (tt.warn == "") != (w == "") || !strings.Contains(w, tt.warn) {
				t.Errorf("warnings %q, want one containing %q", w, tt.warn)
			}
		})
	}
}

// TestRefusalIsOneLine: a refused option is one line on stderr and exit
// 1, before anything runs.
func TestRefusalIsOneLine(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"/b", "/m", "-o", "bogus"}, &stderr); code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	if got := stderr.String(); strings.Count(got, "\n") != 1 || !strings.HasPrefix(got, "mount.fuse.cmfs: unknown option") {
		t.Errorf("stderr %q, want one line naming the option", got)
	}
}

// TestCmfsBinary: the cmfs next to the helper wins, then PREFIX/bin's for
// a helper in PREFIX/sbin, through a /sbin symlink to it, then PATH.
func TestCmfsBinary(t *testing.T) {
	prefix := t.TempDir()
	mk := func(p string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	helper := mk(filepath.Join(prefix, "sbin", "mount.fuse.cmfs"))
	link := filepath.Join(t.TempDir(), "mount.fuse.cmfs")
	if err := os.Symlink(helper, link); err != nil {
		t.Fatal(err)
	}
	onPath := mk(filepath.Join(t.TempDir(), "cmfs"))
	t.Setenv("PATH", filepath.Dir(onPath))
	check := func(want string) {
		t.Helper()
		got, err := cmfsBinaryFor(link)
		if err != nil || got != want {
			t.Errorf("cmfsBinaryFor(%s) = %q, %v; want %q", link, got, err, want)
		}
	}
	check(onPath)
	bin := mk(filepath.Join(prefix, "bin", "cmfs"))
	check(bin)
	check(mk(filepath.Join(prefix, "sbin", "cmfs")))
	t.Setenv("PATH", "")
	os.Remove(filepath.Join(prefix, "sbin", "cmfs"))
	os.Remove(bin)
	if _, err := cmfsBinaryFor(link); err == nil {
		t.Error("no cmfs anywhere: no error")
	}
}
