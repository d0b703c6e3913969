package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"corpus/drivers"
)

// Labels and annotations that tie cluster objects to corpus guests.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "corpus"
	LabelGuestID   = "corpus.dev/guest-id"
	LabelGuest     = "corpus.dev/guest"
	LabelVolume    = "corpus.dev/volume"
	AnnotSpecHash  = "corpus.dev/spec-hash"
	AnnotImage     = "corpus.dev/image"
	containerName  = "guest"
	volumeName     = "data"
)

// managedSelector selects every object corpus manages.
var managedSelector = LabelManagedBy + "=" + managedBy

// guestSelector selects the objects of one guest.
func guestSelector(id string) string {
	return managedSelector + "," + LabelGuestID + "=" + id
}

// validate refuses a spec the cluster would refuse or misread, before
// anything is written.
func validate(spec drivers.GuestSpec) error {
	var errs []string
	if msgs := validation.IsDNS1035Label(spec.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("name %q is not a DNS label: %s", spec.Name, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsValidLabelValue(spec.ID); spec.ID == "" || len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("guest id %q cannot be a label value", spec.ID))
	}
	if len(spec.Packages) > 0 {
		// The scheduler places none here (Capabilities.PackageImages).
		errs = append(errs, "a container image takes no extra packages: build them into the image")
	}
	if err := validImage(spec.Image); err != nil {
		errs = append(errs, err.Error())
	}
	if spec.MemoryBytes < 0 || spec.CPUMillis < 0 {
		errs = append(errs, "memory and cpu limits must not be negative")
	}
	for k := range spec.Env {
		if msgs := validation.IsEnvVarName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Sprintf("env %q: %s", k, strings.Join(msgs, "; ")))
		}
	}
	seen := map[string]bool{}
	for _, p := range spec.Ports {
		if p.GuestPort < 1 || p.GuestPort > 65535 || p.HostPort < 0 || p.HostPort > 65535 {
			errs = append(errs, fmt.Sprintf("port %d:%d is out of range", p.HostPort, p.GuestPort))
		}
		if _, err := protocol(p.Protocol); err != nil {
			errs = append(errs, err.Error())
		}
		key := portName(p)
		if seen[key] {
			errs = append(errs, fmt.Sprintf("port %d/%s is given twice", servicePort(p), p.Protocol))
		}
		seen[key] = true
	}
	if len(spec.Mounts) > 0 {
		errs = append(errs, "host folder mounts cannot reach a cluster's pods; give the guest a volume")
	}
	if v := spec.Volume; v != nil && (v.SizeBytes <= 0 || !strings.HasPrefix(v.Path, "/") || len(validation.IsDNS1123Label(v.Name)) > 0) {
		errs = append(errs, fmt.Sprintf("volume %q of %d bytes at %q: want a DNS label, a positive size and an absolute path", v.Name, v.SizeBytes, v.Path))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", drivers.ErrInvalidSpec, strings.Join(errs, "; "))
	}
	return nil
}

// The grammar of an image reference, as the OCI distribution reference
// defines it: [domain[:port]/]path[:tag][@digest].
var imageRef = func() *regexp.Regexp {
	const (
		domainComp = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
		domain     = domainComp + `(?:\.` + domainComp + `)*(?::[0-9]+)?`
		pathComp   = `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
		name       = `(?:` + domain + `/)?` + pathComp + `(?:/` + pathComp + `)*`
		tag        = `[\w][\w.-]{0,127}`
		digest     = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`
	)
	return regexp.MustCompile(`^` + name + `(?::` + tag + `)?(?:@` + digest + `)?$`)
}()

func validImage(ref string) error {
	if ref == "" || len(ref) > 255 || !imageRef.MatchString(ref) {
		return fmt.Errorf("image %q is not an image reference like registry.example/app:1.2", ref)
	}
	return nil
}

func protocol(p string) (corev1.Protocol, error) {
	switch p {
	case "", "tcp":
		return corev1.ProtocolTCP, nil
	case "udp":
		return corev1.ProtocolUDP, nil
	}
	return "", fmt.Errorf("protocol %q: want tcp or udp", p)
}

// servicePort is the port the guest's Service offers: the node port the
// user asked for, or the guest port itself.
func servicePort(p drivers.Port) int {
	if p.HostPort > 0 {
		return p.HostPort
	}
	return p.GuestPort
}

func portName(p drivers.Port) string {
	proto := p.Protocol
	if proto == "" {
		proto = "tcp"
	}
	return proto + "-" + strconv.Itoa(servicePort(p))
}

// guestLabels are the labels of every object of a guest.
func guestLabels(spec drivers.GuestSpec) map[string]string {
	return map[string]string{LabelManagedBy: managedBy, LabelGuestID: spec.ID, LabelGuest: spec.Name}
}

// specHash identifies what corpus asked for, so a changed spec is told
// apart from a field the cluster defaulted.
func specHash(spec drivers.GuestSpec) string {
	spec.Network, spec.Mounts = nil, nil
	if spec.Volume != nil {
		// The claim's size lives on the claim, not in the pod template.
		spec.Volume = &drivers.Volume{Path: spec.Volume.Path}
	}
	b, _ := json.Marshal(spec) // maps marshal with sorted keys
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// desiredPodTemplate is the pod template of the guest's workload: one
// container with the spec's image, limits, env and ports, the claim of
// its volume mounted by name, and the pull secret of its image's
// registry (pullSecret, "" for none).
func desiredPodTemplate(spec drivers.GuestSpec, pullSecret string) corev1.PodTemplateSpec {
	c := corev1.Container{
		Name:  containerName,
		Image: spec.Image,
		// The same replacement of the image's entrypoint and cmd as
		// Kubernetes' own (a project's supervisor replaces both below).
		Command: spec.Command,
		Args:    spec.Args,
	}
	res := corev1.ResourceList{}
	if spec.MemoryBytes > 0 {
		res[corev1.ResourceMemory] = *resource.NewQuantity(spec.MemoryBytes, resource.BinarySI)
	}
	if spec.CPUMillis > 0 {
		res[corev1.ResourceCPU] = *resource.NewMilliQuantity(spec.CPUMillis, resource.DecimalSI)
	}
	if len(res) > 0 {
		// Requests equal limits: the guest gets what the scheduler counted.
		c.Resources = corev1.ResourceRequirements{Limits: res, Requests: res.DeepCopy()}
	}
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: spec.Env[k]})
	}
	for _, p := range spec.Ports {
		proto, _ := protocol(p.Protocol)
		c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: int32(p.GuestPort), Protocol: proto})
	}
	pod := corev1.PodSpec{Containers: []corev1.Container{c}}
	if pullSecret != "" {
		pod.ImagePullSecrets = []corev1.LocalObjectReference{{Name: pullSecret}}
	}
	if spec.Volume != nil {
		pod.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: volumeName, MountPath: spec.Volume.Path}}
		pod.Volumes = []corev1.Volume{{Name: volumeName, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: spec.Volume.Name},
		}}}
	}
	if b := spec.Boot; b != nil {
		// The process supervisor is the container's command: the
		// kubelet restarts it, with back-off, when it dies, and counts
		// the restarts; its folders are emptyDirs, which a restarted
		// container finds as they were.
		pod.Containers[0].Command, pod.Containers[0].Args = b.Command, nil
		for i, path := range b.Keep {
			name := fmt.Sprintf("corpus-keep-%d", i)
			pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path})
			pod.Volumes = append(pod.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		}
	}
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: guestLabels(spec)}, Spec: pod}
}

// workloadMeta is the metadata of the guest's Deployment or StatefulSet.
func workloadMeta(ns string, spec drivers.GuestSpec) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: spec.Name, Namespace: ns, Labels: guestLabels(spec),
		Annotations: map[string]string{AnnotSpecHash: specHash(spec), AnnotImage: spec.Image},
	}
}

// desiredDeployment is the Deployment of a guest without a volume, with
// replicas.
func desiredDeployment(ns string, spec drivers.GuestSpec, replicas int32, pullSecret string) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: workloadMeta(ns, spec),
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelGuestID: spec.ID}},
			Template: desiredPodTemplate(spec, pullSecret),
		},
	}
	if spec.Volume != nil {
		// One writer of a ReadWriteOnce claim: the old pod goes first.
		d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	}
	return d
}

// desiredStatefulSet is the StatefulSet of a guest with a volume, with
// replicas. Its pod mounts the claim corpus keeps for the volume, by
// name, rather than a volumeClaimTemplate: the claim outlives the guest
// and binds to a later guest of the volume, grows by editing it (claim
// templates cannot change), and exists without a StatefulSet controller
// to make it. The one pod (<name>-0) keeps a stable name, and the
// StatefulSet replaces it only once the old one is gone, so one writer at
// a time holds the ReadWriteOnce claim.
func desiredStatefulSet(ns string, spec drivers.GuestSpec, replicas int32, pullSecret string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: workloadMeta(ns, spec),
		Spec: appsv1.StatefulSetSpec{
			Replicas:    &replicas,
			ServiceName: spec.Name,
			Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{LabelGuestID: spec.ID}},
			Template:    desiredPodTemplate(spec, pullSecret),
		},
	}
}

// desiredService is the Service of the guest's ports, nil without ports.
func desiredService(ns string, spec drivers.GuestSpec) *corev1.Service {
	if len(spec.Ports) == 0 {
		return nil
	}
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: spec.Name, Namespace: ns, Labels: guestLabels(spec),
			Annotations: map[string]string{AnnotSpecHash: specHash(spec)},
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{LabelGuestID: spec.ID},
		},
	}
	for _, p := range spec.Ports {
		proto, _ := protocol(p.Protocol)
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{
			Name: portName(p), Protocol: proto, Port: int32(servicePort(p)), TargetPort: intstr.FromInt32(int32(p.GuestPort)),
		})
	}
	return s
}

// desiredClaim is the PersistentVolumeClaim of the guest's volume, nil
// without one: named after the volume, labelled with it and with the
// guest it is bound to now.
func desiredClaim(ns, storageClass string, spec drivers.GuestSpec) *corev1.PersistentVolumeClaim {
	if spec.Volume == nil {
		return nil
	}
	l := guestLabels(spec)
	l[LabelVolume] = spec.Volume.Name
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Volume.Name, Namespace: ns, Labels: l},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(spec.Volume.SizeBytes, resource.BinarySI),
			}},
		},
	}
	if storageClass != "" {
		c.Spec.StorageClassName = &storageClass
	}
	return c
}

// ownedBy makes the workload w the controlling owner of an object.
func ownedBy(w *workload) []metav1.OwnerReference {
	yes := true
	return []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: w.kind, Name: w.meta.Name, UID: w.meta.UID, Controller: &yes, BlockOwnerDeletion: &yes,
	}}
}
