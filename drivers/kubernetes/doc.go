// Package kubernetes runs corpus guests as workloads of an existing
// Kubernetes cluster, through its API server (k8s.io/client-go).
//
// One driver instance serves one corpus node, and that node is a cluster
// (or a part of one): its guests live in one namespace, the node's
// namespace prefix followed by the node name ("corpus-" + "k8s-eu" =
// "corpus-k8s-eu"). Per guest the driver keeps
//
//	Deployment  <guest name>   a guest without a volume: replicas 1
//	                           (running) or 0 (stopped), one container
//	                           "guest" with the image, limits, env and
//	                           ports of the spec
//	StatefulSet <guest name>   a guest with a volume, instead: the same
//	                           pod template, mounting the PVC by name
//	Service     <guest name>   only when the guest publishes ports
//	PVC         <volume name>  only with a volume; it outlives the guest
//	                           (Destroy leaves it) and a later guest of the
//	                           same volume binds it again
//	Ingress     route-<id>     one per http route, when the cluster has an
//	                           IngressClass (PublishRoutes)
//
// Every object carries the labels app.kubernetes.io/managed-by=corpus,
// corpus.dev/guest-id and corpus.dev/guest, and the workloads and Service
// the annotation corpus.dev/spec-hash. The Service is owned by the
// workload (an owner reference), so a cluster's garbage collector removes
// it with it; Destroy deletes them all itself, by label, since not every
// API server runs a collector. A guest that gains or loses a volume
// changes workload kind; the other kind is deleted first.
//
// Routes without an Ingress (no IngressClass, or tcp routes) are served
// by the agent's proxy, at the address RouteTarget gives: the Service's
// cluster IP and port.
//
// The driver is level-based (Capabilities.Converge): Create on an existing
// guest compares the objects in the cluster with the ones the spec asks
// for, field by field where corpus sets a field, and writes back the
// difference, so a changed spec and a hand edit are repaired alike; a
// deleted object is made again. Nothing outside the node's namespace is
// read or written, and inside it only objects with the corpus labels.
//
// Observed state comes from the cluster: a workload with no replicas is
// stopped, one with a ready replica running, otherwise starting; the
// message names the ready count and the newest pod's phase and reason.
package kubernetes
