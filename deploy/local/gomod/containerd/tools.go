//go:build tools

// Package tools pins the container runtime of the real node that
// deploy/local/build --node compiles: containerd, its runc shim, and ctr
// (used to import locally built images).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
