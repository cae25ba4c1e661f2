//go:build tools

// Package tools pins the reference OCI registry (distribution), which
// `deploy/local/up --registry` serves over TLS on 127.0.0.1.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
