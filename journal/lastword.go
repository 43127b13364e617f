package journal

import "strings"

// LastWord is what the journal last said about a path: a regular file
// with its size and checksum, or a symlink with its target.
type LastWord struct {
	Symlink bool
	Size    int64
	XXH64   string
	Target  string // of a symlink
}

// Replay folds events, in id order, into the files and symlinks they
// leave behind (directories are not tracked): each event is the last word
// on the paths it names — content after INSERT, WRITE, TRUNCATE, RESTORE,
// LINK and a file RENAME (its files without a cmroot name); absence after
// DELETE, RMDIR and DROP_*; a rename moves everything at and below its
// path, an exchange swaps both. It is what a replica built from these
// events holds, and what the tree held right after the last of them.
func Replay(events []Event) map[string]LastWord {
	tr := map[string]LastWord{}
	below := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	// take removes and returns everything at and below dir, by path
	// relative to it.
	take := func(dir string) map[string]LastWord {
		moved := map[string]LastWord{}
		for p, w := range tr {
			if below(p, dir) {
				moved[strings.TrimPrefix(p, dir)] = w
				delete(tr, p)
			}
		}
		return moved
	}
	put := func(dir string, moved map[string]LastWord) {
		for suffix, w := range moved {
			tr[dir+suffix] = w
		}
	}
	for _, e := range events {
		switch e.Type {
		case Delete, Rmdir, DropPartition, DropTable, DropDatabase:
			take(e.Path)
			continue
		case Rename, RenameTable, RenamePartition, RenameDatabase:
			a, b := take(e.Path), take(e.NewPath)
			put(e.NewPath, a)
			if e.Target == "exchange" {
				put(e.Path, b)
			}
		case Symlink:
			tr[e.Path] = LastWord{Symlink: true, Target: e.Target}
		}
		for _, f := range e.Files {
			if f.CM == "" {
				tr[f.Path] = LastWord{Size: f.Size, XXH64: f.XXH64}
			}
		}
	}
	return tr
}
