// Package kubernetes runs corpus guests as workloads of an existing
// Kubernetes cluster, through its API server (k8s.io/client-go).
//
// One driver instance serves one corpus node, and that node is a cluster
// (or a part of one): its guests live in one namespace, the node's
// namespace prefix followed by the node name ("corpus-" + "k8s-eu" =
// "corpus-k8s-eu"). Per guest the driver keeps
//
//	Deployment  <guest name>   replicas 1 (running) or 0 (stopped), one
//	                           container "guest" with the image, limits,
//	                           env and ports of the spec
//	Service     <guest name>   only when the guest publishes ports
//	PVC         <volume name>  only with a volume; it outlives the guest
//	                           (Destroy leaves it) and a later guest of the
//	                           same volume binds it again
//
// Every object carries the labels app.kubernetes.io/managed-by=corpus,
// corpus.dev/guest-id and corpus.dev/guest, and the annotation
// corpus.dev/spec-hash. The Service is owned by the Deployment (an owner
// reference), so a cluster's garbage collector removes it with the
// Deployment; Destroy deletes both itself all the same, by label, since
// not every API server runs a collector.
//
// The driver is level-based (Capabilities.Converge): Create on an existing
// guest compares the objects in the cluster with the ones the spec asks
// for, field by field where corpus sets a field, and writes back the
// difference, so a changed spec and a hand edit are repaired alike; a
// deleted object is made again. Nothing outside the node's namespace is
// read or written, and inside it only objects with the corpus labels.
//
// Observed state comes from the cluster: a Deployment with no replicas is
// stopped, one with a ready replica running, otherwise starting; the
// message names the ready count and the newest pod's phase and reason.
package kubernetes
