package control

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dialEnv makes the test binary a child that calls Status on the socket
// it names and prints the outcome (TestSocketOtherUser).
const dialEnv = "CMFS_CONTROL_TEST_DIAL"

func TestMain(m *testing.M) {
	if sock := os.Getenv(dialEnv); sock != "" {
		os.Exit(dialChild(sock))
	}
	os.Exit(m.Run())
}

func dialChild(sock string) int {
	c, err := Dial(sock)
	if err != nil {
		fmt.Println("refused:", err)
		return 0
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Status(ctx); err != nil {
		fmt.Println("refused:", err)
		return 0
	}
	fmt.Println("connected")
	return 0
}

// TestSocketOtherUser: another user is refused even where the socket's
// mode would let it connect (the mode is set only after bind); the
// owner and root are served.
func TestSocketOtherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: it runs a client as another uid")
	}
	e := newEnv(t)
	if err := os.Chmod(e.socket, 0o666); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(e.socket)
	os.Chmod(dir, 0o755)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "control.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cred *syscall.Credential
		want string
	}{
		{"nobody", &syscall.Credential{Uid: 65534, Gid: 65534}, "refused"},
		{"root", nil, "connected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, "-test.run=^$")
			cmd.Env = []string{dialEnv + "=" + e.socket}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: tc.cred}
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), tc.want) {
				t.Errorf("client as %s: %v: %q, want %q", tc.name, err, out, tc.want)
			}
		})
	}
}
