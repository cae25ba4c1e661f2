//go:build tools

// Package tools pins the Karpenter controller with its kwok cloud provider
// (sigs.k8s.io/karpenter/kwok), built by `deploy/local/build --karpenter` for
// the Karpenter end-to-end tests and the scale-up benchmark; never by the
// control plane.
package tools

import (
	_ "sigs.k8s.io/karpenter/kwok"
)
