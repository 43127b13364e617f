// Package auth is how replicad's services know their clients without TLS:
// by a bearer token that only the serving account can read.
//
// `replicad serve` keeps the token in a file (File: created when missing,
// 32 random bytes hex-encoded, mode 0600; refused unless it is a regular
// file of the serving uid without group or other permission bits). A
// client on the same host reads the file (Read) and sends the token with
// every call as "authorization: Bearer <token>" metadata (Credentials);
// the server checks every call, unary and streaming, in constant time
// (ServerOptions) and answers a missing or wrong token with
// codes.Unauthenticated. Whoever can read the file is, to the server, the
// serving account: that is the whole contract. Between hosts, mutual TLS
// (internal/tlsconfig) takes its place: the certificate is the credential.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cmfs-project/cmfs/internal/durable"
	"github.com/cmfs-project/cmfs/internal/tlsconfig"
)

// FileName is the token file's name in its default directory (serve's
// state directory, or its first volume).
const FileName = "replicad.token"

// tokenBytes is the randomness of a token File creates.
const tokenBytes = 32

// minLen is the shortest token a file may hold: 128 bits of hex.
const minLen = 32

// header is the metadata key the token travels in.
const header = "authorization"

var (
	// ErrUnauthenticated is what a client's error wraps when the server
	// refused its credential (the token, or its certificate), and what a
	// service's error map turns codes.Unauthenticated back into.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrFile is wrapped for a token file that cannot be used: unsafe
	// (another owner, group or other permission bits, not a regular
	// file), unreadable, or holding no token.
	ErrFile = errors.New("bad token file")
)

// File returns the token in path, creating the file if it is missing.
// An existing file must be a regular file owned by this process's uid
// with no group or other permission bits, holding a token; a new one is
// written durably and appears whole or not at all, so that two servers
// starting at once end up with the same token.
//
// Errors: ErrFile (wrapped), each naming the file and the fix.
func File(path string) (string, error) {
	tok, err := check(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return tok, err
	}
	b := make([]byte, tokenBytes)
	rand.Read(b) // never fails (crypto/rand)
	tok = hex.EncodeToString(b)
	err = durable.Write(filepath.Dir(path), 0o600, true,
		func(f *os.File) error {
			_, err := f.WriteString(tok + "\n")
			return err
		},
		func(tmp string) (string, error) {
			// A link, unlike a rename, fails when another server made
			// the file first: its token then wins.
			if err := os.Link(tmp, path); err != nil {
				return "", err
			}
			os.Remove(tmp)
			return path, nil
		})
	if errors.Is(err, fs.ErrExist) {
		return check(path)
	}
	if err != nil {
		return "", fmt.Errorf("token file %s: cannot create it: %v: %w", path, unwrapPath(err), ErrFile)
	}
	return tok, nil
}

// check reads an existing token file after checking it is safe; the
// error wraps fs.ErrNotExist when there is none.
func check(path string) (string, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("token file %s: %v: %w", path, unwrapPath(err), ErrFile)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("token file %s is not a regular file: remove it, and serve creates one: %w", path, ErrFile)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return "", fmt.Errorf("token file %s belongs to uid %d, not to the serving uid %d: chown it, or remove it and serve creates one: %w",
			path, st.Uid, os.Getuid(), ErrFile)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("token file %s has mode %04o, readable or writable by others: chmod 600 %s: %w", path, perm, path, ErrFile)
	}
	return Read(path)
}

// Read returns the token in path, as a client reads it: the file of the
// server it talks to.
//
// Errors: ErrFile (wrapped): missing, unreadable (this account is not the
// serving one), or holding no token.
func Read(path string) (string, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("token file %s: permission denied, run as the serving account: %w", path, ErrFile)
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("token file %s does not exist: give the --token-file of the 'replicad serve' (it prints it), or start it: %w", path, ErrFile)
	case err != nil:
		return "", fmt.Errorf("token file %s: %v: %w", path, unwrapPath(err), ErrFile)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < minLen || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return "", fmt.Errorf("token file %s holds no token (%d or more printable characters on one line): remove it, and serve creates one: %w", path, minLen, ErrFile)
	}
	return tok, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// Credentials attaches token to every call of a connection
// (grpc.WithPerRPCCredentials). It asks for no transport security: the
// token is for loopback connections, which the services allow without
// TLS only.
func Credentials(token string) credentials.PerRPCCredentials { return bearer("Bearer " + token) }

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{header: string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// ServerOptions make a gRPC server refuse every call, unary or
// streaming, that does not carry token, with codes.Unauthenticated.
func ServerOptions(token string) []grpc.ServerOption {
	c := checker{want: []byte("Bearer " + token)}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(c.unary), grpc.ChainStreamInterceptor(c.stream)}
}

type checker struct{ want []byte }

func (c checker) check(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(header)
	switch {
	case len(got) == 0:
		return status.Error(codes.Unauthenticated, "no token: give --token-file, the file 'replicad serve' prints, as the account that serves")
	case len(got) > 1 || subtle.ConstantTimeCompare([]byte(got[0]), c.want) != 1:
		return status.Error(codes.Unauthenticated, "wrong token: --token-file is not the file this 'replicad serve' prints")
	}
	return nil
}

func (c checker) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (c checker) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := c.check(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}

// ProbeRefusal is a client interceptor for a TLS connection to addr
// (made with cfg): a call that fails as Unavailable is checked with
// tlsconfig.Probe, and when the server refuses cfg's certificate, the
// call fails as Unauthenticated with the refusal, instead of as the
// broken pipe or EOF TLS 1.3 can show, which a caller would retry.
func ProbeRefusal(addr string, cfg *tls.Config) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if status.Code(err) != codes.Unavailable || tlsconfig.Refused(err) {
			return err
		}
		if perr := tlsconfig.Probe(ctx, addr, cfg); perr != nil {
			return status.Error(codes.Unauthenticated, perr.Error())
		}
		return err
	}
}
