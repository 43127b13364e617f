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
	r := NewReplayer()
	for i := range events {
		r.Apply(&events[i])
	}
	return r.Words()
}

// Replayer is Replay one event at a time, for a journal read in chunks
// (Log.Range) rather than held whole. Removing or moving a path below
// which it holds nothing costs a few map operations; only a directory
// with words below it costs a look at every word.
type Replayer struct {
	words map[string]LastWord
	// below counts the words strictly below each directory that has any.
	below map[string]int
}

// NewReplayer returns a Replayer that has seen no event.
func NewReplayer() *Replayer {
	return &Replayer{words: map[string]LastWord{}, below: map[string]int{}}
}

// Words returns the last word on every path so far; the map is the
// Replayer's, valid until the next Apply.
func (r *Replayer) Words() map[string]LastWord { return r.words }

// Apply folds the next event in id order.
func (r *Replayer) Apply(e *Event) {
	switch e.Type {
	case Delete, Rmdir, DropPartition, DropTable, DropDatabase:
		r.take(e.Path)
		return
	case Rename, RenameTable, RenamePartition, RenameDatabase:
		a, b := r.take(e.Path), r.take(e.NewPath)
		r.put(e.NewPath, a)
		if e.Target == "exchange" {
			r.put(e.Path, b)
		}
	case Symlink:
		r.set(e.Path, LastWord{Symlink: true, Target: e.Target})
	}
	for _, f := range e.Files {
		if f.CM == "" {
			r.set(f.Path, LastWord{Size: f.Size, XXH64: f.XXH64})
		}
	}
}

func (r *Replayer) set(p string, w LastWord) {
	if _, ok := r.words[p]; !ok {
		for d := parentDir(p); d != ""; d = parentDir(d) {
			r.below[d]++
		}
	}
	r.words[p] = w
}

func (r *Replayer) del(p string) {
	if _, ok := r.words[p]; !ok {
		return
	}
	delete(r.words, p)
	for d := parentDir(p); d != ""; d = parentDir(d) {
		if r.below[d]--; r.below[d] <= 0 {
			delete(r.below, d)
		}
	}
}

// take removes and returns everything at and below dir, by path relative
// to it.
func (r *Replayer) take(dir string) map[string]LastWord {
	moved := map[string]LastWord{}
	if w, ok := r.words[dir]; ok {
		moved[""] = w
		r.del(dir)
	}
	if r.below[dir] > 0 {
		for p, w := range r.words {
			if strings.HasPrefix(p, dir+"/") {
				moved[p[len(dir):]] = w
				r.del(p)
			}
		}
	}
	return moved
}

func (r *Replayer) put(dir string, moved map[string]LastWord) {
	for suffix, w := range moved {
		r.set(dir+suffix, w)
	}
}

// parentDir returns the directory of a slash-separated relative path, ""
// at the top.
func parentDir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}
