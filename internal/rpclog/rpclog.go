// Package rpclog logs the calls replicad's gRPC servers serve: one line
// at debug per call (a per-request line is never worth more), with its
// method, peer, duration and status code, refused calls included.
package rpclog

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// ServerOptions returns the interceptors that log each call to log; put
// them before the ones that may refuse a call (auth), so that a refusal
// is logged too. A nil log logs nothing and adds nothing.
func ServerOptions(log *slog.Logger) []grpc.ServerOption {
	if log == nil {
		return nil
	}
	l := logger{log}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.unary), grpc.ChainStreamInterceptor(l.stream)}
}

type logger struct{ log *slog.Logger }

func (l logger) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if !l.log.Enabled(ctx, slog.LevelDebug) {
		return h(ctx, req)
	}
	start := time.Now()
	resp, err := h(ctx, req)
	l.done(ctx, info.FullMethod, start, err)
	return resp, err
}

func (l logger) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx := ss.Context()
	if !l.log.Enabled(ctx, slog.LevelDebug) {
		return h(srv, ss)
	}
	start := time.Now()
	err := h(srv, ss)
	l.done(ctx, info.FullMethod, start, err)
	return err
}

func (l logger) done(ctx context.Context, method string, start time.Time, err error) {
	attrs := []slog.Attr{slog.String("method", method)}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer", p.Addr.String()))
	}
	attrs = append(attrs, slog.Duration("took", time.Since(start)), slog.String("code", status.Code(err).String()))
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	l.log.LogAttrs(ctx, slog.LevelDebug, "rpc", attrs...)
}
