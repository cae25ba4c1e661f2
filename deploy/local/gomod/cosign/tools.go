//go:build tools

// Package tools pins cosign, which signs the release's image index and chart,
// and crane (go-containerregistry, at the version cosign resolves), which
// pushes the image index from its OCI layout.
package tools

import (
	_ "github.com/google/go-containerregistry/cmd/crane"
	_ "github.com/sigstore/cosign/v2/cmd/cosign"
)
