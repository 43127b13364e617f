// Package window is the gRPC flow-control windows and keepalive of
// replicad's servers and of the clients that stream files from them,
// defined once so that a service gets the same windows, and allows its
// clients' pings, whichever server it is registered on (the Source
// service alone, or next to the Container service on a node).
//
// Large enough that a load fetching several 1 MiB chunks at once never
// waits for a window update on loopback or a LAN: gRPC's default of 64
// KiB, grown by its estimator, keeps a bulk stream well below what the
// disks do.
package window

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Stream is each stream's window, Conn a connection's, both ways.
const (
	Stream = 8 << 20
	Conn   = 32 << 20
)

// Ping is how long a client's connection may go without a byte from the
// server before it pings, and PingTimeout how long it waits for the
// answer: a server that vanished without a reset (its host down, the
// network cut) fails the calls in progress within their sum, where they
// would otherwise wait forever.
const (
	Ping        = 30 * time.Second
	PingTimeout = 20 * time.Second
)

// Server returns the options that give a server these windows and let
// its clients ping as Keepalive does.
func Server() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(Stream), grpc.InitialConnWindowSize(Conn),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: Ping / 2, PermitWithoutStream: true})}
}

// Keepalive returns the option that makes a client ping (Ping,
// PingTimeout).
func Keepalive() grpc.DialOption {
	return grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: Ping, Timeout: PingTimeout})
}

// Dial returns the options that give a client these windows.
func Dial() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(Stream), grpc.WithInitialConnWindowSize(Conn)}
}
