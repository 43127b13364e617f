// Package window is the gRPC flow-control windows of replicad's servers
// and of the clients that stream files from them, defined once so that a
// service gets the same windows whichever server it is registered on (the
// Source service alone, or next to the Container service on a node).
//
// Large enough that a load fetching several 1 MiB chunks at once never
// waits for a window update on loopback or a LAN: gRPC's default of 64
// KiB, grown by its estimator, keeps a bulk stream well below what the
// disks do.
package window

import "google.golang.org/grpc"

// Stream is each stream's window, Conn a connection's, both ways.
const (
	Stream = 8 << 20
	Conn   = 32 << 20
)

// Server returns the options that give a server these windows.
func Server() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(Stream), grpc.InitialConnWindowSize(Conn)}
}

// Dial returns the options that give a client these windows.
func Dial() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(Stream), grpc.WithInitialConnWindowSize(Conn)}
}
