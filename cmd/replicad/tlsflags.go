package main

import (
	"context"

	"github.com/cmfs-project/cmfs/internal/tlsconfig"
	"github.com/cmfs-project/cmfs/source"
)

// tlsFlags are the mTLS flags serve and the container commands share.
type tlsFlags struct {
	cert, key, ca string
	allow         []string
}

// flagSet is what register needs of a *pflag.FlagSet.
type flagSet interface {
	StringVar(p *string, name, value, usage string)
	StringSliceVar(p *[]string, name string, value []string, usage string)
}

// register adds --tls-cert, --tls-key, --tls-ca and --tls-allow to f;
// role says what the certificate is for in the help.
func (t *tlsFlags) register(f flagSet, role string) {
	f.StringVar(&t.cert, "tls-cert", "", "PEM `FILE` of the "+role+" certificate (with --tls-key and --tls-ca: mutual TLS 1.3)")
	f.StringVar(&t.key, "tls-key", "", "PEM `FILE` of the certificate's private key")
	f.StringVar(&t.ca, "tls-ca", "", "PEM `FILE` of the CA that peers' certificates must chain to")
	f.StringSliceVar(&t.allow, "tls-allow", nil, "accept only peers whose certificate names one of these `NAME`s (common name or DNS SAN)")
}

func (t tlsFlags) config() tlsconfig.Config {
	return tlsconfig.Config{Cert: t.cert, Key: t.key, CA: t.ca, Allow: t.allow}
}

// dialSource connects load and follow to a Source service, with mutual
// TLS when the flags ask for it. Fetches stream through: the load stages
// and verifies every file itself.
func dialSource(ctx context.Context, addr string, t tlsFlags) (*source.Client, error) {
	opts := []source.Option{source.WithStreaming()}
	if tc := t.config(); tc.Enabled() {
		cfg, err := tlsconfig.Client(tc)
		if err != nil {
			return nil, err
		}
		opts = append(opts, source.WithTLS(cfg))
	}
	return source.Dial(ctx, addr, opts...)
}
