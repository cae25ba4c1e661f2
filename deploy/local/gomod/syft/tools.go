//go:build tools

// Package tools pins syft, the SBOM generator deploy/release runs over the
// image's OCI layout (Cargo.lock's crates and the runtime's Debian packages).
package tools

import _ "github.com/anchore/syft/cmd/syft"
