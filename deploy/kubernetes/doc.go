// Package kubernetes holds no code: it is the module of the Kubernetes
// manifests beside it (relay/, relay-msk-iam/, consumer/) and of the tests
// that check them, which `make test` runs (`cd deploy/kubernetes && go test
// ./...`). Its own go.mod keeps the Kubernetes and KEDA modules its tests
// decode into out of courier's go.mod.
//
// The tests render every kustomization as `kubectl apply -k` would, decode
// every object strictly into its Go type (k8s.io/api, KEDA's
// apis/keda/v1alpha1, kustomize's types: an unknown field is an error), and
// check the rules the manifests' comments state: probes on declared ports
// the programs listen on, requests and limits, no secret inline, grace
// periods longer than the shutdowns they cover, disruption budgets that
// select their Deployment, a ScaledObject within its topic's partitions
// whose trigger keys KEDA's Kafka scaler reads, and environment variables
// and flags the programs read (docs/cli-reference.md, examples/payouts).
// The guide is docs/kubernetes.md.
package kubernetes
