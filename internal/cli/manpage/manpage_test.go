package manpage

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestWrite(t *testing.T) {
	root := &cobra.Command{Use: "prog", Short: "A program", Long: "What prog does, at length."}
	leaf := &cobra.Command{Use: "leaf ARG", Short: "A leaf", RunE: func(*cobra.Command, []string) error { return nil }}
	leaf.Flags().String("color", "blue", "the `COLOR` to use")
	group := &cobra.Command{Use: "group", Short: "A group"}
	group.AddCommand(leaf)
	root.AddCommand(group, Command())
	dir := filepath.Join(t.TempDir(), "man1")
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")

	if err := Write(root, dir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	// The hidden man-pages command has no page; completion has pages
	// though cobra adds it only when a command line runs.
	want := []string{"prog-completion-bash.1", "prog-completion-fish.1", "prog-completion-powershell.1", "prog-completion-zsh.1", "prog-completion.1", "prog-group-leaf.1", "prog-group.1", "prog.1"}
	if !slices.Equal(got, want) {
		t.Errorf("pages %v, want %v", got, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, "prog-group-leaf.1"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, s := range []string{`.TH "PROG-GROUP-LEAF" "1" "Nov 2023" "prog `, `"cmfs manual"`, "prog-group-leaf - A leaf", `\fB--color\fP="blue"`, "COLOR"} {
		if !strings.Contains(page, s) {
			t.Errorf("prog-group-leaf.1 lacks %q:\n%s", s, page)
		}
	}
	if strings.Contains(page, "Auto generated") {
		t.Errorf("prog-group-leaf.1 names its generator:\n%s", page)
	}
}
