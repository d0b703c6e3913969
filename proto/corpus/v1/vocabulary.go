// Package corpusv1 is the corpus API: the messages and services generated
// from the .proto files beside this one (make proto), and, in this file,
// written by hand, the words of the API that are strings in the messages,
// shared by the coordinator, the agents and the CLI.
package corpusv1

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
)

// MaxConfigValueBytes is the longest value, in clear, of a config
// variable or an external service's secret: the API refuses longer ones,
// and the CLI refuses to send them.
const MaxConfigValueBytes = 32 << 10

// Node statuses (Node.status).
const (
	NodeInitializing = "initializing"
	NodeReady        = "ready"
	NodeDown         = "down"
)

// Node modes (Node.mode): the project environment a node takes guests
// of, or drain (it takes none, and its stateless guests move away).
const (
	ModeDev     = "dev"
	ModeStaging = "staging"
	ModeProd    = "prod"
	ModeDrain   = "drain"
)

// Node eligibility, as `corpus node mode` sets it (Node.ineligible).
const (
	Eligible   = "eligible"
	Ineligible = "ineligible"
)

// GuestLost is the status of a guest whose node is down: a guest with a
// volume stays there until the node returns (its data is there); a
// stateless one stays only while no other node takes it.
const GuestLost = "lost"

// Guest desired states (Guest.desired_state).
const (
	DesiredRunning = "running"
	DesiredStopped = "stopped"
	DesiredDeleted = "deleted"
)

// Guest observed states (GuestObserved.state), as agents report them.
// Drivers may report others ("starting", "stopping", "frozen").
const (
	ObservedCreating = "creating"
	ObservedStarting = "starting"
	ObservedRunning  = "running"
	ObservedStopping = "stopping"
	ObservedStopped  = "stopped"
	ObservedFailed   = "failed"
	ObservedDeleted  = "deleted"
)

// Volume desired states (Volume.desired_state) and the observed state of
// a usable volume (VolumeObserved.state; failed and deleted as for guests).
const (
	VolumePresent = "present"
	VolumeDeleted = "deleted"
	VolumeReady   = "ready"
)

// SameObserved reports whether two observations say the same thing,
// ignoring when they were made, so unchanged reports write nothing.
func SameObserved(a, b *GuestObserved) bool {
	return a.GetState() == b.GetState() && a.GetPid() == b.GetPid() && a.GetMessage() == b.GetMessage() &&
		a.GetRelease() == b.GetRelease() && a.GetReleaseError() == b.GetReleaseError() &&
		a.GetStagedRelease() == b.GetStagedRelease() && a.GetStagedPort() == b.GetStagedPort()
}

// ImageTCPPorts are the tcp ports of x.image_ports ("8080/tcp"), in
// their order.
func (x *GuestObserved) ImageTCPPorts() []int32 {
	var out []int32
	for _, p := range x.GetImagePorts() {
		num, proto, _ := strings.Cut(p, "/")
		if n, err := strconv.ParseInt(num, 10, 32); err == nil && proto == "tcp" && n > 0 && n <= 65535 {
			out = append(out, int32(n))
		}
	}
	return out
}

// RouteKind is how a route picks the traffic it carries (Route.kind,
// CreateRouteRequest.kind): by HTTP host name, or by node port.
type RouteKind string

// Route kinds.
const (
	RouteHTTP RouteKind = "http"
	RouteTCP  RouteKind = "tcp"
)

// Is reports whether route x is of kind k.
func (x *Route) Is(k RouteKind) bool { return x.GetKind() == string(k) }

// Why a coordinator asks a client to retry (Retry.reason).
const (
	RetryNotLeader = "not_leader"
	RetryBusy      = "busy"
	RetryStopping  = "stopping" // the replica that answered is stopping
)

// User roles (User.role).
const (
	RoleOps    = "ops"
	RoleDev    = "dev"
	RoleViewer = "viewer"
)

// AuthLDAP is the User.auth of users who log in with their directory
// password (corpus login --ldap).
const AuthLDAP = "ldap"

// Project environments (ProjectEnv.name).
const (
	EnvDev     = "dev"
	EnvStaging = "staging"
	EnvProd    = "prod"
)

// EnvNamed returns a copy of a project's environment by name, nil when
// the project has none of that name.
func EnvNamed(p *Project, name string) *ProjectEnv {
	for _, e := range p.GetEnvs() {
		if e.Name == name {
			return proto.Clone(e).(*ProjectEnv)
		}
	}
	return nil
}

// Release statuses (Release.status) and release step statuses
// (ReleaseStep.status).
const (
	ReleaseDeploying = "deploying"
	ReleaseSucceeded = "succeeded"
	ReleaseFailed    = "failed"

	StepOK      = "ok"
	StepFailed  = "failed"
	StepSkipped = "skipped"
)

// What made a release (Release.trigger).
const (
	TriggerPush    = "push"
	TriggerConfig  = "config"
	TriggerRestart = "restart"
	TriggerDeploy  = "deploy"
)

// ReleaseName is how users write a release number: "r3".
func ReleaseName(n uint32) string {
	return "r" + strconv.FormatUint(uint64(n), 10)
}

// ParseReleaseName reads a release number as users write it: "r3" or "3".
func ParseReleaseName(s string) (uint32, bool) {
	if len(s) > 0 && (s[0] == 'r' || s[0] == 'R') {
		s = s[1:]
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil && n > 0
}

// Service states (ServiceObserved.state), as agents and the coordinator
// report them.
const (
	ServiceStarting  = "starting"
	ServiceHealthy   = "healthy"
	ServiceUnhealthy = "unhealthy"
	ServiceStopped   = "stopped"
	ServiceLost      = "lost"
)

// Backup statuses (Backup.status) and what made one (Backup.trigger).
const (
	BackupRunning   = "running"
	BackupSucceeded = "succeeded"
	BackupFailed    = "failed"

	BackupManual   = "manual"
	BackupSchedule = "schedule"
	BackupImport   = "import"
)

// Backup schedules (Service.backup_schedule): every hour, day or week;
// "" takes none.
const (
	ScheduleHourly = "hourly"
	ScheduleDaily  = "daily"
	ScheduleWeekly = "weekly"
)

// DefaultBackupKeep is how many scheduled backups a service or volume
// keeps when it does not say (backup_keep 0).
const DefaultBackupKeep = 7

// ServiceGuestName is the name of a service's guest.
func ServiceGuestName(service string) string { return "svc-" + service }

// TopologyVersion is the version of ProjectTopology that corpus writes
// and reads (ProjectTopology.version).
const TopologyVersion = "corpus.project/v1"

// The writes admission extensions are called for (Extension.on), which
// are also the kinds of the calls' requests.
const (
	OnGuestCreate   = "guest.create"
	OnGuestUpdate   = "guest.update"
	OnProjectCreate = "project.create"
	OnServiceCreate = "service.create"
	OnImageDeploy   = "image.deploy"
	OnDeploy        = "deploy"
)

// ExtensionEvents are the writes extensions are called for, in the order
// the docs list them.
var ExtensionEvents = []string{OnGuestCreate, OnGuestUpdate, OnProjectCreate, OnServiceCreate, OnImageDeploy, OnDeploy}

// Kinds of extensions (Extension.kind).
const (
	ExtensionMutate   = "mutate"
	ExtensionValidate = "validate"
	ExtensionLint     = "lint"
)

// What a failed extension call does to its write (Extension.failure_policy):
// refuse it, or let it pass.
const (
	FailurePolicyFail   = "fail"
	FailurePolicyIgnore = "ignore"
)

// How long an extension call may take (Extension.timeout_ms): the
// default when none is given, and the most.
const (
	DefaultExtensionTimeout = 2 * time.Second
	MaxExtensionTimeout     = 30 * time.Second
)

// ACME challenge types corpus answers (AcmeChallenge.type).
const (
	ChallengeHTTP01    = "http-01"
	ChallengeTLSALPN01 = "tls-alpn-01"
)

// ScaleText writes process counts as corpus scale takes them: "web=3
// worker=1", sorted by type; "one instance" when there are none.
func ScaleText(scale map[string]uint32) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(scale)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, scale[k]))
	}
	if parts == nil {
		return "one instance"
	}
	return strings.Join(parts, " ")
}

// InstanceCount is how many guests an environment's process counts ask
// for: the largest count, at least one (instance 1 stays, running
// nothing, when every count is 0).
func InstanceCount(scale map[string]uint32) uint32 {
	n := uint32(1)
	for _, c := range scale {
		n = max(n, c)
	}
	return n
}

// RunsOn says whether instance index (from 1) of an environment runs
// process type name: a type runs on the instances up to its count, and a
// type not scaled on instance 1 only.
func RunsOn(scale map[string]uint32, index uint32, name string) bool {
	c, ok := scale[name]
	if !ok {
		c = 1
	}
	return max(index, 1) <= c
}

// InstanceGuestName is the guest name of an environment's instance: the
// environment's own guest for the first, PROJECT-ENV-N for the others.
func InstanceGuestName(project, env string, index uint32) string {
	if index <= 1 {
		return project + "-" + env
	}
	return project + "-" + env + "-" + strconv.FormatUint(uint64(index), 10)
}

// Phases of a rotation of the cluster CA (CaRotation.phase).
const (
	CAPhaseTrust = "trust"
	CAPhaseSign  = "sign"
)

// Trusted are the CAs trusted as of c, PEM: the cluster CA and, during a
// rotation, the new one; signer is the one that signs. ok is false when
// c is nil: the CA of a cluster never rotated is its replicas' own.
func (c *ClusterCa) Trusted() (trusted []string, signer string, ok bool) {
	if c == nil {
		return nil, "", false
	}
	trusted, signer = []string{c.CertPem}, c.CertPem
	if r := c.Rotation; r != nil {
		trusted = append(trusted, r.CertPem)
		if r.Phase == CAPhaseSign {
			signer = r.CertPem
		}
	}
	return trusted, signer, true
}
