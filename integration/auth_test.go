package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"github.com/cmfs-project/cmfs/internal/wait"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/cmfs-project/cmfs/api/containerpb"
	"github.com/cmfs-project/cmfs/api/replpb"
	"github.com/cmfs-project/cmfs/internal/auth"
)

// TestReplicadAuth checks who may read through replicad: a root-only file
// in a mount with allow_other, served by `replicad serve`, must not reach
// a local user who cannot read the serving account's token file — by any
// client command, nor by a raw gRPC client of any service. Root, with the
// token file, gets it.
func TestReplicadAuth(t *testing.T) {
	bin := replicadPath(t)
	if os.Getuid() != 0 {
		t.Skip("needs root: it runs commands as another user")
	}
	cred := testUser(t)

	m := mount(t, "-o", "allow_other")
	const secret = "SECRET\n"
	if err := os.MkdirAll(m.path("sec.db/t/dt=1"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"part-1", "part-2"} {
		if err := os.WriteFile(m.path("sec.db/t/dt=1/"+name), []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Deleted: cmroot holds the original.
	if err := os.Remove(m.path("sec.db/t/dt=1/part-1")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "a cmroot entry", func() bool {
		des, _ := os.ReadDir(m.CMRoot)
		return len(des) > 0
	})
	src := serve(t, m.State)
	node := startNode(t, "auth-node", "--state", m.State)
	tokenFile := os.Getenv(tokenEnv)

	// The user runs a copy of replicad (the build directory is root's
	// only) in a home of its own.
	shared, err := os.MkdirTemp("", "cmfs-auth-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	os.Chmod(shared, 0o755)
	userBin := filepath.Join(shared, "replicad")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(userBin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(shared, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatal(err)
	}
	// A copy of the token the user may see but not read.
	unreadable := filepath.Join(shared, auth.FileName)
	tok, err := auth.Read(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(unreadable, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A token of the user's own, which the servers do not know.
	own := filepath.Join(home, "own.token")
	if err := os.WriteFile(own, []byte(randomToken(t)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(own, int(cred.Uid), int(cred.Gid))

	dump := filepath.Join(t.TempDir(), "dumps")
	mustReplicad(t, "dump", "--state", m.State, "--out", dump)
	des, err := os.ReadDir(dump)
	if err != nil || len(des) != 1 {
		t.Fatalf("dump: %v, %v", des, err)
	}
	dumpDir := filepath.Join(shared, "dump")
	if out, err := exec.Command("cp", "-r", filepath.Join(dump, des[0].Name()), dumpDir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	exec.Command("chmod", "-R", "a+rX", dumpDir).Run()

	target := filepath.Join(home, "rep")
	clients := []struct {
		name string
		args []string
	}{
		{"follow", []string{"follow", "--source", src.Addr, "--target", target}},
		{"load", []string{"load", "--source", src.Addr, "--dump", dumpDir, "--target", target}},
		{"slots", []string{"slots", "--source", src.Addr}},
		{"container list", []string{"container", "list", "--server", node.Addr}},
		{"follow the node", []string{"follow", "--source", node.Addr, "--target", target}},
	}
	for _, cr := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"no credential", nil, "no credential: give --token-file"},
		{"unreadable token file", []string{"--token-file", unreadable}, "permission denied, run as the serving account"},
		{"own token", []string{"--token-file", own}, "wrong token"},
	} {
		for _, c := range clients {
			t.Run(cr.name+"/"+c.name, func(t *testing.T) {
				args := append(append([]string{}, c.args...), cr.flags...)
				res := runAs(t, cred, home, userBin, args...)
				lines := strings.Split(strings.TrimSuffix(res.Stderr, "\n"), "\n")
				if res.Code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "replicad: ") || !strings.Contains(res.Stderr, cr.want) {
					t.Errorf("replicad %s as uid %d: %v; want exit 1 and one line saying %q", strings.Join(args, " "), cred.Uid, res, cr.want)
				}
			})
		}
	}
	filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
		if err == nil && (strings.HasPrefix(d.Name(), "part-") || d.Name() == "sec.db") {
			t.Errorf("the refused user got %s", p)
		}
		return nil
	})

	// A raw client of every service, without the token and with a wrong
	// one: every method, unary or streaming, is Unauthenticated.
	for _, svc := range []struct {
		addr string
		desc *grpc.ServiceDesc
	}{
		{src.Addr, &replpb.Source_ServiceDesc},
		{node.Addr, &replpb.Source_ServiceDesc},
		{node.Addr, &containerpb.Container_ServiceDesc},
		// The health service a service manager's probe uses.
		{src.Addr, &healthpb.Health_ServiceDesc},
		{node.Addr, &healthpb.Health_ServiceDesc},
	} {
		for _, token := range []string{"", randomToken(t)} {
			for _, method := range methods(svc.desc) {
				if code := rawCall(t, svc.addr, token, svc.desc, method); code != codes.Unauthenticated {
					t.Errorf("%s %s (token %q): %v, want Unauthenticated", svc.addr, method, token, code)
				}
			}
		}
	}
	if code := rawCall(t, src.Addr, tok, &replpb.Source_ServiceDesc, "Status"); code != codes.OK {
		t.Errorf("Status with the token: %v", code)
	}
	for _, addr := range []string{src.Addr, node.Addr} {
		if code := rawCall(t, addr, tok, &healthpb.Health_ServiceDesc, "Check"); code != codes.OK {
			t.Errorf("%s Health.Check with the token: %v", addr, code)
		}
	}

	// Root, with the token file, gets the file and the original.
	rootTarget := filepath.Join(t.TempDir(), "rep")
	mustReplicad(t, "slots", "--source", src.Addr, "--token-file", tokenFile)
	node.must(t, "list", "--token-file", tokenFile)
	mustReplicad(t, "load", "--source", src.Addr, "--dump", dumpDir, "--target", rootTarget, "--token-file", tokenFile)
	if b, err := os.ReadFile(filepath.Join(rootTarget, "sec.db/t/dt=1/part-2")); err != nil || string(b) != secret {
		t.Errorf("root's load: %q, %v", b, err)
	}
}

// testUser creates a system user for the test (removed at its end), or
// falls back to nobody.
func testUser(t *testing.T) *syscall.Credential {
	t.Helper()
	name := "cmfs-test-" + randomToken(t)[:4]
	if out, err := exec.Command("useradd", "-r", "-M", "-s", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Logf("useradd %s: %v: %s; running as 65534", name, err, out)
		return &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// runAs runs bin as cred in dir, with an environment that names no token
// file.
func runAs(t *testing.T, cred *syscall.Credential, dir, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := result{Stdout: out.String(), Stderr: errb.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.Code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run %s as uid %d: %v", bin, cred.Uid, err)
	}
	if ctx.Err() != nil {
		t.Errorf("%s %s as uid %d did not end within 30s: retried?", bin, strings.Join(args, " "), cred.Uid)
	}
	return res
}

// methods lists a service's methods, unary and streaming.
func methods(d *grpc.ServiceDesc) []string {
	var ms []string
	for _, m := range d.Methods {
		ms = append(ms, m.MethodName)
	}
	for _, s := range d.Streams {
		ms = append(ms, s.StreamName)
	}
	return ms
}

// rawCall calls one method with an empty request, and token unless "",
// and returns the status code.
func rawCall(t *testing.T, addr, token string, d *grpc.ServiceDesc, method string) codes.Code {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.Credentials(token)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	full := "/" + d.ServiceName + "/" + method
	for _, s := range d.Streams {
		if s.StreamName != method {
			continue
		}
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: s.ServerStreams, ClientStreams: s.ClientStreams}, full)
		if err != nil {
			return status.Code(err)
		}
		st.SendMsg(&emptypb.Empty{})
		st.CloseSend()
		return status.Code(st.RecvMsg(&emptypb.Empty{}))
	}
	return status.Code(conn.Invoke(ctx, full, &emptypb.Empty{}, &emptypb.Empty{}))
}
