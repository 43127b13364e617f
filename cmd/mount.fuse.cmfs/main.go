// Command mount.fuse.cmfs is mount(8)'s helper for file systems of type
// fuse.cmfs: with it installed as /sbin/mount.fuse.cmfs,
//
//	mount -t fuse.cmfs /data/warehouse /mnt/warehouse -o retain=72h,allow_other
//
// and the /etc/fstab line
//
//	/data/warehouse  /mnt/warehouse  fuse.cmfs  retain=72h,allow_other,nofail  0  0
//
// mount the backing directory with protection, as `cmfs mount --daemon`
// does: mount(8) runs the helper as
//
//	mount.fuse.cmfs BACKING MOUNTPOINT [-sfnv] [-N NAMESPACE] [-o OPTIONS]
//
// and it runs `cmfs mount --daemon` with the options turned into its
// flags. It exits 0 only once the mount answers, leaving the mount
// process running in the background (logging to STATE/cmfs.log); umount
// MOUNTPOINT unmounts, and the mount process then flushes, closes the
// journal and cmroot, and exits.
//
// The options (docs/ops.md lists them all): cmfs's own (config=, state=,
// cmroot=, retain=, exclude=, no_default_excludes, journal_reserve=,
// sync=, log_format=, log_level=, debug, ready_timeout=) become its flags; the
// kernel's that a FUSE mount takes (allow_other, default_permissions,
// nosuid, nodev, noexec, suid, dev, exec) go to the mount as -o; the ones
// mount(8) and fstab keep for themselves (defaults, rw, async, auto,
// noauto, nofail, _netdev, user, users, nouser, owner, group, comment=,
// x-*) are ignored. Anything else is refused in one line, unless -s
// (sloppy) makes it a warning. -f (fake) checks the options and mounts
// nothing, -v prints the cmfs command line, -n is accepted (cmfs writes
// no mtab).
//
// The cmfs binary is the one next to this program (symlinks resolved),
// or in ../bin from it (make install puts the helper in PREFIX/sbin and
// cmfs in PREFIX/bin), else the first on PATH.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// Exit codes, mount(8)'s: 1 for a bad invocation, 32 for a mount that
// failed.
const (
	exitUsage   = 1
	exitFailure = 32
)

// program is how this helper is named in its messages.
const program = "mount.fuse.cmfs"

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	inv, err := parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", program, err)
		return exitUsage
	}
	for _, w := range inv.warnings {
		fmt.Fprintf(stderr, "%s: %s\n", program, w)
	}
	bin, err := cmfsBinary()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", program, err)
		return exitFailure
	}
	if inv.verbose {
		fmt.Fprintf(stderr, "%s: %s %s\n", program, bin, strings.Join(inv.cmfsArgs(), " "))
	}
	if inv.fake {
		return 0
	}
	cmd := exec.Command(bin, inv.cmfsArgs()...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, stderr
	// An interrupt goes to cmfs, which stops the mount it was waiting
	// for and says so; the helper waits for that.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "%s: start %s: %v\n", program, bin, err)
		return exitFailure
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			cmd.Process.Signal(s)
		case err := <-done:
			if err != nil {
				// cmfs has said why on stderr.
				return exitFailure
			}
			return 0
		}
	}
}

// invocation is what mount(8) asked for.
type invocation struct {
	backing, mountpoint string
	// flags are cmfs mount's flags, in the order the options came.
	flags []string
	// kernel are the options for the mount itself (cmfs mount -o).
	kernel []string
	// readyTimeout is ready_timeout=, "" if not given.
	readyTimeout string
	fake         bool
	verbose      bool
	warnings     []string
}

// cmfsArgs is the cmfs command line that mounts what inv asks for.
func (inv invocation) cmfsArgs() []string {
	// mount(8) waits for the helper, and the mount after an unclean stop
	// and a reboot may reconcile a large tree first: by default it waits
	// as long as the mount process works toward the mount (systemd's
	// mount timeout bounds a boot's wait; x-systemd.mount-timeout=).
	timeout := inv.readyTimeout
	if timeout == "" {
		timeout = "0"
	}
	args := []string{"mount", "--daemon", "--ready-timeout", timeout}
	args = append(args, inv.flags...)
	if len(inv.kernel) > 0 {
		args = append(args, "-o", strings.Join(inv.kernel, ","))
	}
	return append(args, "--", inv.backing, inv.mountpoint)
}

// parse reads mount(8)'s helper command line: the source and the
// mountpoint, then -s, -f, -n, -v (alone or together), -N NAMESPACE,
// -o OPTIONS (repeatable) and -t TYPE, in any order.
func parse(args []string) (invocation, error) {
	var inv invocation
	var positional, options []string
	sloppy := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		// A flag with a value: -o OPTS, -oOPTS, -t TYPE, -N NS.
		if name := a[1]; len(a) >= 2 && strings.IndexByte("otN", name) >= 0 {
			val := a[2:]
			if val == "" {
				if i+1 >= len(args) {
					return inv, fmt.Errorf("-%c needs a value", name)
				}
				i++
				val = args[i]
			}
			switch name {
			case 'o':
				options = append(options, val)
			case 't':
				if val != "fuse.cmfs" && val != "cmfs" {
					return inv, fmt.Errorf("-t %s: this helper mounts fuse.cmfs only", val)
				}
			case 'N':
				return inv, fmt.Errorf("-N %s: mounting in another mount namespace is not supported; run mount there", val)
			}
			continue
		}
		for _, c := range a[1:] {
			switch c {
			case 's':
				sloppy = true
			case 'f':
				inv.fake = true
			case 'n':
				// cmfs writes no mtab.
			case 'v':
				inv.verbose = true
			default:
				return inv, fmt.Errorf("unknown flag -%c (usage: %s BACKING MOUNTPOINT [-sfnv] [-o OPTIONS])", c, program)
			}
		}
	}
	if len(positional) != 2 {
		return inv, fmt.Errorf("need BACKING and MOUNTPOINT, got %d argument(s) (usage: %s BACKING MOUNTPOINT [-sfnv] [-o OPTIONS])", len(positional), program)
	}
	inv.backing, inv.mountpoint = positional[0], positional[1]
	for _, o := range options {
		list, err := splitOptions(o)
		if err != nil {
			return inv, err
		}
		for _, opt := range list {
			if err := inv.option(opt); err != nil {
				if !sloppy {
					return inv, err
				}
				inv.warnings = append(inv.warnings, err.Error()+" (ignored: -s)")
			}
		}
	}
	return inv, nil
}

// cmfsValued maps cmfs's options that take a value to its flags.
var cmfsValued = map[string]string{
	"config":          "--config",
	"state":           "--state",
	"cmroot":          "--cmroot",
	"retain":          "--retain",
	"exclude":         "--exclude",
	"journal_reserve": "--journal-reserve",
	"sync":            "--sync",
	"log_format":      "--log-format",
	"log_level":       "--log-level",
}

// cmfsSwitches maps cmfs's options without a value to its flags.
var cmfsSwitches = map[string]string{
	"no_default_excludes": "--no-default-excludes",
	"debug":               "--debug",
}

// kernelOptions go to the mount itself: a FUSE mount takes them (the mount
// flags among them become mount(2)'s flags).
var kernelOptions = map[string]bool{
	"allow_other": true, "default_permissions": true,
	"nosuid": true, "nodev": true, "noexec": true,
	"suid": true, "dev": true, "exec": true,
}

// ignored are mount(8)'s and fstab's own options, and what a read-write
// mount is anyway.
var ignored = map[string]bool{
	"defaults": true, "rw": true, "async": true,
	"auto": true, "noauto": true, "nofail": true, "_netdev": true,
	"user": true, "users": true, "nouser": true, "owner": true, "group": true,
}

// refused are options mount(8) knows that a cmfs mount cannot honour,
// with the reason.
var refused = map[string]string{
	"ro":          "cmfs mounts read-write only (read the backing directory itself for a read-only view)",
	"sync":        "a synchronous mount is not what cmfs offers; its durability option is sync=always (the default) or sync=interval[:DUR]",
	"dirsync":     "cmfs flushes the directories an event names itself; see sync=",
	"atime":       "access times are the backing file system's: give atime options to its mount",
	"noatime":     "access times are the backing file system's: give atime options to its mount",
	"relatime":    "access times are the backing file system's: give atime options to its mount",
	"strictatime": "access times are the backing file system's: give atime options to its mount",
	"lazytime":    "access times are the backing file system's: give atime options to its mount",
	"diratime":    "access times are the backing file system's: give atime options to its mount",
	"nodiratime":  "access times are the backing file system's: give atime options to its mount",
}

// option files one option of -o.
func (inv *invocation) option(opt string) error {
	name, val, hasVal := strings.Cut(opt, "=")
	switch {
	case opt == "":
		return nil
	case strings.HasPrefix(name, "x-") || name == "comment":
		return nil // for systemd and other readers of fstab
	case ignored[name] && !hasVal:
		return nil
	case kernelOptions[name] && !hasVal:
		inv.kernel = append(inv.kernel, name)
		return nil
	case cmfsSwitches[name] != "" && !hasVal:
		inv.flags = append(inv.flags, cmfsSwitches[name])
		return nil
	case name == "ready_timeout" && hasVal:
		inv.readyTimeout = val
		return nil
	case cmfsValued[name] != "" && hasVal:
		if val == "" {
			return fmt.Errorf("option %s= needs a value", name)
		}
		inv.flags = append(inv.flags, cmfsValued[name], val)
		return nil
	case refused[name] != "" && !hasVal:
		return fmt.Errorf("option %s: %s", name, refused[name])
	case cmfsValued[name] != "" || name == "ready_timeout":
		return fmt.Errorf("option %s needs a value (%s=...)", name, name)
	case cmfsSwitches[name] != "" || kernelOptions[name] || ignored[name]:
		return fmt.Errorf("option %s takes no value", name)
	}
	return fmt.Errorf("unknown option %q (see docs/ops.md for the options of fuse.cmfs)", opt)
}

// splitOptions splits a comma-separated option list; a value in double
// quotes may hold commas (exclude="a,b"), as libmount writes it.
func splitOptions(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ',' && !quoted:
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteRune(r)
		}
	}
	if quoted {
		return nil, fmt.Errorf("options %q: unterminated quote", s)
	}
	return append(out, cur.String()), nil
}

// cmfsBinary finds the cmfs to run: next to this program, or in ../bin
// from it (symlinks resolved: /sbin/mount.fuse.cmfs may link to
// PREFIX/sbin), else on PATH.
func cmfsBinary() (string, error) {
	exe, _ := os.Executable()
	return cmfsBinaryFor(exe)
}

// cmfsBinaryFor is cmfsBinary for a helper at exe.
func cmfsBinaryFor(exe string) (string, error) {
	if exe, err := filepath.EvalSymlinks(exe); err == nil && exe != "" {
		dir := filepath.Dir(exe)
		for _, p := range []string{filepath.Join(dir, "cmfs"), filepath.Join(dir, "..", "bin", "cmfs")} {
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return filepath.Clean(p), nil
			}
		}
	}
	p, err := exec.LookPath("cmfs")
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", errors.New("cmfs not found next to this helper, in ../bin from it, or on PATH")
		}
		return "", err
	}
	return p, nil
}
