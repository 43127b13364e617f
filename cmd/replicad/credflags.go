package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/internal/tlsconfig"
	"github.com/cmfs-project/cmfs/source"
)

// tokenEnv names the token file when --token-file is not given.
const tokenEnv = "REPLICAD_TOKEN_FILE"

// credFlags are the credential flags serve and every client share: mTLS
// between hosts, else the serving account's token file.
type credFlags struct {
	cert, key, ca string
	allow         []string
	tokenFile     string
}

// flagSet is what register needs of a *pflag.FlagSet.
type flagSet interface {
	StringVar(p *string, name, value, usage string)
	StringSliceVar(p *[]string, name string, value []string, usage string)
}

// register adds --tls-cert, --tls-key, --tls-ca, --tls-allow and
// --token-file to f; role says what the certificate is for in the help,
// tokenDefault where the token file is without the flag or the
// environment ("": nowhere, a client's case).
func (c *credFlags) register(f flagSet, role, tokenDefault string) {
	f.StringVar(&c.cert, "tls-cert", "", "PEM `FILE` of the "+role+" certificate (with --tls-key and --tls-ca: mutual TLS 1.3)")
	f.StringVar(&c.key, "tls-key", "", "PEM `FILE` of the certificate's private key")
	f.StringVar(&c.ca, "tls-ca", "", "PEM `FILE` of the CA that peers' certificates must chain to")
	f.StringSliceVar(&c.allow, "tls-allow", nil, "accept only peers whose certificate names one of these `NAME`s (common name or DNS SAN)")
	def := "$" + tokenEnv
	if tokenDefault != "" {
		def += ", else " + tokenDefault
	}
	f.StringVar(&c.tokenFile, "token-file", "", "without TLS, the serving account's token `FILE` (default: "+def+")")
}

func (c credFlags) config() tlsconfig.Config {
	return tlsconfig.Config{Cert: c.cert, Key: c.key, CA: c.ca, Allow: c.allow}
}

// tokenPath is --token-file, else $REPLICAD_TOKEN_FILE, else def.
func (c credFlags) tokenPath(def string) string {
	switch {
	case c.tokenFile != "":
		return c.tokenFile
	case os.Getenv(tokenEnv) != "":
		return os.Getenv(tokenEnv)
	}
	return def
}

// errBoth refuses --token-file next to TLS, where it would be ignored.
var errBoth = errors.New("give --token-file or --tls-cert/--tls-key/--tls-ca, not both: with TLS the certificate is the credential")

// serverToken returns the token serve checks, and its file: def unless
// the flag or the environment names one; "" with TLS.
func (c credFlags) serverToken(def string) (token, path string, err error) {
	if c.config().Enabled() {
		if c.tokenFile != "" {
			return "", "", errBoth
		}
		return "", "", nil
	}
	path, err = filepath.Abs(c.tokenPath(def))
	if err != nil {
		return "", "", fmt.Errorf("--token-file: %w", err)
	}
	token, err = auth.File(path)
	return token, path, err
}

// client returns a client's credential for the server that flag
// (--source, --server) names at addr: its TLS configuration, or the
// token. Without either it refuses up front, before anything connects.
func (c credFlags) client(ctx context.Context, flag, addr string) (*tls.Config, string, error) {
	if tc := c.config(); tc.Enabled() {
		if c.tokenFile != "" {
			return nil, "", errBoth
		}
		cfg, err := tlsconfig.Client(tc)
		return cfg, "", err
	}
	// A token does not make another host's address safe to dial: that
	// refusal comes first.
	if err := tlsconfig.CheckLoopback(ctx, "connect to", addr); err != nil {
		return nil, "", err
	}
	path := c.tokenPath("")
	if path == "" {
		return nil, "", fmt.Errorf("%s %s: no credential: give --token-file (same host) or --tls-cert/--tls-key/--tls-ca", flag, addr)
	}
	token, err := auth.Read(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	return nil, token, nil
}

// dialSource connects load, follow and slots to a Source service, with
// mutual TLS or the token. Fetches stream through: the load stages and
// verifies every file itself.
func dialSource(ctx context.Context, addr string, c credFlags) (*source.Client, error) {
	cfg, token, err := c.client(ctx, "--source", addr)
	if err != nil {
		return nil, err
	}
	opts := []source.Option{source.WithStreaming()}
	if cfg != nil {
		opts = append(opts, source.WithTLS(cfg))
	} else {
		opts = append(opts, source.WithToken(token))
	}
	return source.Dial(ctx, addr, opts...)
}
