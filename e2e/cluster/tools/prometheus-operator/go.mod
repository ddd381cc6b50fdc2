// Tools module: the Prometheus Operator's CRDs (PodMonitor), applied to the local control plane
// by the tests that render a release's PodMonitor. No binary is built from it.
module deployctl.local/e2e/tools/prometheus-operator

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.80.1
