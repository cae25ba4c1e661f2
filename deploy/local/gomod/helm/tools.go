//go:build tools

// Package tools pins the helm command built by deploy/local/build (used by
// the Helm chart's render and dry-run tests, never by the control plane).
package tools

import _ "helm.sh/helm/v4/cmd/helm"
