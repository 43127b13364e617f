package source

import (
	"context"
	"slices"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cmfs-project/cmfs/api/replpb"
)

// ServerStats counts what a Server served since NewServer, for metrics.
type ServerStats struct {
	// Requests are the calls that reached the service (past the
	// credentials check of whichever gRPC server it is on), by method and
	// status code: every method with its codes.OK entry, then one for
	// each other code it has ended with, in the service's method order.
	Requests []RequestCount
	// Events are the journal events Events streams sent.
	Events uint64
	// Files are the files ReadFile sent to the end (its last chunk, the
	// one with the checksum), Bytes the file data it sent, those of
	// files cut short included.
	Files, Bytes uint64
}

// RequestCount is how many calls of Method ended with Code.
type RequestCount struct {
	// Method is the service's name for it: "ReadFile", "Events", ...
	Method string
	Code   codes.Code
	N      uint64
}

// numCodes bounds the codes counted apart; any code past the last one
// gRPC defines (Unauthenticated) is counted as Unknown.
const numCodes = int(codes.Unauthenticated) + 1

// counters are a Server's: atomic, so that counting costs a call or a
// chunk one add and reading them takes no lock.
type counters struct {
	methods              []string
	calls                [][numCodes]atomic.Uint64 // by method, then code
	events, files, bytes atomic.Uint64
}

func (c *counters) done(method int, err error) {
	code := status.Code(err)
	if int(code) >= numCodes {
		code = codes.Unknown
	}
	c.calls[method][code].Add(1)
}

// Stats returns the counts as they are now.
func (s *Server) Stats() ServerStats {
	c := s.stats
	st := ServerStats{Events: c.events.Load(), Files: c.files.Load(), Bytes: c.bytes.Load()}
	for m, name := range c.methods {
		for code := range numCodes {
			if n := c.calls[m][code].Load(); n > 0 || code == int(codes.OK) {
				st.Requests = append(st.Requests, RequestCount{Method: name, Code: codes.Code(code), N: n})
			}
		}
	}
	return st
}

// service returns the Source service's description with every handler
// wrapped to count its call, so that the calls are counted on whichever
// gRPC server the service is registered (Serve's own, or a node's:
// Register), below that server's interceptors: a call refused by the
// credentials check never reaches the count.
func (s *Server) service() *grpc.ServiceDesc {
	d := replpb.Source_ServiceDesc
	d.Methods = slices.Clone(d.Methods)
	d.Streams = slices.Clone(d.Streams)
	c := &counters{}
	index := func(name string) int {
		c.methods = append(c.methods, name)
		return len(c.methods) - 1
	}
	for i := range d.Methods {
		m, h := index(d.Methods[i].MethodName), d.Methods[i].Handler
		// The generated handler calls the server's interceptor chain
		// with the method itself; given one that ends in counted, the
		// count comes after every interceptor.
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, chain grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, dec, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, method grpc.UnaryHandler) (any, error) {
				counted := func(ctx context.Context, req any) (any, error) {
					resp, err := method(ctx, req)
					c.done(m, err)
					return resp, err
				}
				if chain == nil {
					return counted(ctx, req)
				}
				return chain(ctx, req, info, counted)
			})
		}
	}
	for i := range d.Streams {
		m, h := index(d.Streams[i].StreamName), d.Streams[i].Handler
		// A stream's interceptors wrap its handler from outside.
		d.Streams[i].Handler = func(srv any, stream grpc.ServerStream) error {
			err := h(srv, stream)
			c.done(m, err)
			return err
		}
	}
	c.calls = make([][numCodes]atomic.Uint64, len(c.methods))
	s.stats = c
	return &d
}
