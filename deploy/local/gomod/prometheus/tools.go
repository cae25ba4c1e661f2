//go:build tools

// Package tools pins the prometheus and promtool commands built by
// `deploy/local/build --prometheus` (used by the monitoring tests: the rules'
// checks and unit tests, and the e2e that evaluates every dashboard and
// alert expression; never by the control plane).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
