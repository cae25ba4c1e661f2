//go:build tools

// Package tools pins runc, the OCI runtime of the real node that
// deploy/local/build --node compiles (with cgo and libseccomp).
package tools

import _ "github.com/opencontainers/runc"
