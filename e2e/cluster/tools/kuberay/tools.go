//go:build tools

// Package tools pins KubeRay's ray-operator, the multi-node group engine the e2e suite runs
// against the local control plane (one RayCluster per model copy).
package tools

import _ "github.com/ray-project/kuberay/ray-operator"
