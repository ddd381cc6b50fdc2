//go:build tools

// Package tools pins Flux's source-controller, which the e2e suite runs against the local
// control plane to fetch GitRepositories from a git server on loopback.
package tools

import _ "github.com/fluxcd/source-controller"
