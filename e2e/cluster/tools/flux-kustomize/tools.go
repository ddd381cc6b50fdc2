//go:build tools

// Package tools pins Flux's kustomize-controller, which the e2e suite runs against the local
// control plane to apply Kustomizations from source-controller's artifacts.
package tools

import _ "github.com/fluxcd/kustomize-controller"
