//go:build tools

// Package tools pins the Prometheus commands build.sh builds from this module.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
