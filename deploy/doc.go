// Package deploy holds no code: its tests check what ships outside the Go
// binary against the binary and against each other.
//
//   - deploy/k8s/*.yaml are decoded strictly into the k8s.io/api types
//     (unknown fields, wrongly cased keys and unknown kinds fail), and their
//     cross-references are checked: terminationGracePeriodSeconds against
//     the grace each lifeboat gets, volumes, Secret keys, PriorityClasses,
//     the podFailurePolicy that retries preempted pods, native sidecars;
//     rbac.yaml's Role grants exactly what lifeboat's Kubernetes features
//     use and is bound to the ServiceAccount every Job runs as, and each
//     lifeboat container gets LIFEBOAT_POD_NAME and LIFEBOAT_POD_NAMESPACE
//     from the downward API.
//   - deploy/kueue/*.yaml are applied to a real kube-apiserver with Kueue's
//     own CRDs and strict field validation, and its WorkloadPriorityClasses
//     are checked against deploy/k8s's PriorityClasses.
//   - deploy/jobset/jobset.yaml and deploy/volcano/volcano.yaml are applied
//     to a real kube-apiserver with the engine's own CRD (from its Go
//     module) and strict field validation; their pod templates get the
//     Job checks above that are not about a plain Job's podFailurePolicy;
//     the engine's failure policy is evaluated, as its controller does, for
//     each exit code and disruption; and the lifeboat binary is run with
//     each pod index's environment to check the rank it takes.
//   - images/*/Dockerfile and the root Dockerfile are parsed strictly: the
//     ENTRYPOINT and CMD exec-form JSON arrays, the build ARGs, the
//     LIFEBOAT_* defaults and the files copied in.
//
// Flag and variable names are taken from the lifeboat binary itself (built
// once per test run), so a manifest that names a flag lifeboat does not have
// fails here rather than in a cluster.
package deploy
