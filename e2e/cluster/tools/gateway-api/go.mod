// Tools module: the Gateway API's standard CRDs (HTTPRoute), applied to the local control plane by
// the tests of a canary weighed on an HTTPRoute. No binary is built from it. v1.6.3: v1.7.0 needs Go 1.27.
module deployctl.local/e2e/tools/gateway-api

go 1.26.0

require sigs.k8s.io/gateway-api v1.6.3
