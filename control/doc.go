// Package control is the mount's control socket: a gRPC service on a unix
// socket in the state directory through which sidecars and the CLI reach
// the journal and cmroot while a mount holds them (status, a range or a
// live tail of events, fsck, gc, entry lookup). It is the transport only:
// what those operations do is package upkeep's, which the unmounted CLI
// calls directly.
//
// The socket is created mode 0600, and a connection is accepted only from
// a process of the mount's uid or root (SO_PEERCRED), whatever the mode
// between bind and chmod: only the mount's owner may talk to it.
// Errors cross the wire as gRPC status codes, translated in one place on
// each side (toStatus in the server, fromStatus in the client).
package control
