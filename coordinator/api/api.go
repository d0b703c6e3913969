// Package api is the plumbing the coordinator's connect services share:
// the Backend the handlers read the replicated state and propose Raft
// commands through (Backend.Write), who may call what (Policies), the
// interceptors, the mapping of errors to codes, and the checks several
// handlers make. The handlers live in a package per noun below it,
// mounted by package serve.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/admission"
	"corpus/coordinator/audit"
	"corpus/coordinator/auth"
	"corpus/coordinator/compat"
	"corpus/coordinator/extensions"
	"corpus/coordinator/keyring"
	"corpus/coordinator/state"
	"corpus/dns"
	"corpus/internal/clock"
	"corpus/internal/names"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Backend is what the services need from the coordinator.
type Backend struct {
	Store *state.Store
	// Clock is the time of day tokens are dated and backups fall due by
	// (nil: clock.System).
	Clock clock.Clock
	// Proposer commits commands through Raft; Leadership says where the
	// leader is; Agents reaches the node agents; Zones is the DNS zone
	// this replica serves (nil when DNS is off).
	Proposer
	Leadership
	Agents
	Zones
	// Group is the replica's Raft group.
	Group Group
	// CA signs node certificates (enrollment and renewal) valid CertTTL.
	CA Authority
	// CARotations starts and describes rotations of the cluster CA.
	CARotations CARotations
	CertTTL     time.Duration
	Logger      *slog.Logger

	// audit records calls the state machine never sees (see auditor).
	audit *audit.Auditor
	// admission calls the admission extensions on writes.
	admission *admission.Controller
	// keyrings opens the cluster keyring (sealed config).
	keyrings *keyring.Ring

	// Passwords checks users' passwords for Login (nil: password login
	// is off); LoginTTL is the lifetime, and the longest allowed, of
	// the tokens it issues (0: DefaultLoginTokenTTL).
	Passwords PasswordChecker
	LoginTTL  time.Duration

	// Metrics records every call (nil: none are).
	Metrics *Metrics

	// Extensions calls the operators' admission extensions (nil: writes
	// an extension is for are refused).
	Extensions *extensions.Caller

	// Series is what the dashboard plots (nil: nothing).
	Series SeriesSource

	// Uses hears of each call a user token was accepted for and of each
	// SSH key a node checked at a handshake, with the client's address
	// (nil: last uses are not recorded).
	Uses Uses

	// Guests and Volumes are the handlers of those services (set by
	// serve.Mount): a service's resize goes through them. A project's
	// import makes its services through Services; a service's link
	// makes releases of its projects through Releases.
	Guests   corpusv1connect.GuestServiceHandler
	Volumes  corpusv1connect.VolumeServiceHandler
	Services Services
	Releases Releases

	// ServiceTemplates is the operator's folder of service templates,
	// added to the built-in ones ("": none).
	ServiceTemplates string
}

// Uses records credentials' last uses (coordinator/tokenuse). Neither
// method may block.
type Uses interface {
	// Use: token id authenticated a call from addr.
	Use(tokenID, addr string)
	// UseKey: the SSH key with that fingerprint opened a session on a
	// node from addr.
	UseKey(fingerprint, addr string)
}

// Proposer commits a command through Raft (see coordinator.Server): on
// a follower by passing it to the leader; ProposeLocal only on this
// replica (forwarded commands).
type Proposer interface {
	Propose(ctx context.Context, cmd *corpusv1.Command) (uint64, error)
	ProposeLocal(ctx context.Context, cmd *corpusv1.Command) (uint64, error)
}

// Leadership says where the leader is.
type Leadership interface {
	// LeaderAddr is the current leader's address, "" if unknown.
	LeaderAddr() string
}

// Agents is how the API reaches the node agents.
type Agents interface {
	// NodeSeen records that a node's agent reported now (liveness).
	NodeSeen(nodeID string)
	// AgentClient dials a node agent's API.
	AgentClient(node *corpusv1.Node) corpusv1connect.NodeAgentServiceClient
	// GossipAddr is host:port of this replica's gossip member, which
	// agents join, "" while it has none.
	GossipAddr() string
}

// Zones is the DNS zone this replica serves.
type Zones interface {
	// Zone is the zone served (nil when DNS is off), DNSAddr where it
	// answers. The served zone may lag the state a little while writes
	// stream in; ZoneNow is the zone as of the state now (built on the
	// spot when the served one lags: for listings). RecordFits is
	// ZoneNow().Fits(rec): whether rec could join the zone as of the
	// state now (nil), or why not.
	Zone() *dns.Zone
	ZoneNow() *dns.Zone
	RecordFits(rec dns.Record) error
	DNSAddr() string
}

// PasswordChecker checks a user's password against a directory
// (ldapauth.Directory). Its errors wrap ldapauth.ErrBadCredentials or
// ldapauth.ErrUnavailable.
type PasswordChecker interface {
	Authenticate(ctx context.Context, user, password string) error
}

// DefaultLoginTokenTTL is how long a token from a password login works
// unless the coordinator is configured otherwise.
const DefaultLoginTokenTTL = 24 * time.Hour

// Policies says who may call what.
var Policies = map[string]auth.Policy{
	corpusv1connect.ClusterServiceStatusProcedure:         {auth.Operator, auth.Agent, auth.Coordinator},
	corpusv1connect.ClusterServicePeerProcedure:           {auth.Replica, auth.Coordinator, auth.Operator},
	corpusv1connect.ClusterServiceApplyProcedure:          {auth.Coordinator},
	corpusv1connect.ClusterServiceSeenProcedure:           {auth.Coordinator},
	corpusv1connect.ClusterServiceReadIndexProcedure:      {auth.Coordinator},
	corpusv1connect.ClusterServiceRaftPeersProcedure:      {auth.Operator},
	corpusv1connect.ClusterServiceAddRaftPeerProcedure:    {auth.Operator, auth.Coordinator},
	corpusv1connect.ClusterServiceRemoveRaftPeerProcedure: {auth.Operator, auth.Coordinator},
	corpusv1connect.NodeServiceCreateJoinTokenProcedure:   {auth.Operator},
	corpusv1connect.NodeServiceListNodesProcedure:         {auth.Operator},
	corpusv1connect.NodeServiceGetNodeProcedure:           {auth.Operator},
	corpusv1connect.NodeServiceRemoveNodeProcedure:        {auth.Operator},
	corpusv1connect.NodeServiceSetNodeModeProcedure:       {auth.Operator},
	corpusv1connect.NodeServiceDrainStatusProcedure:       {auth.Operator},
	corpusv1connect.NodeServiceListImagesProcedure:        {auth.Operator},
	corpusv1connect.NodeServiceRemoveImageProcedure:       {auth.Operator},
	corpusv1connect.NodeServicePruneImagesProcedure:       {auth.Operator},
	corpusv1connect.GuestServiceCreateGuestProcedure:      {auth.Operator},
	corpusv1connect.GuestServiceGetGuestProcedure:         {auth.Operator},
	corpusv1connect.GuestServiceListGuestsProcedure:       {auth.Operator},
	corpusv1connect.GuestServiceStartGuestProcedure:       {auth.Operator},
	corpusv1connect.GuestServiceStopGuestProcedure:        {auth.Operator},
	corpusv1connect.GuestServiceDeleteGuestProcedure:      {auth.Operator},
	corpusv1connect.GuestServiceUpdateGuestProcedure:      {auth.Operator},
	corpusv1connect.GuestServiceExecGuestProcedure:        {auth.Operator},
	corpusv1connect.GuestServiceShellProcedure:            {auth.Operator},
	// Logs: as exec (devs on their projects' guests), viewers none.
	corpusv1connect.GuestServiceGuestLogsProcedure:     {auth.Operator, auth.Dev},
	corpusv1connect.ProjectServiceProjectLogsProcedure: {auth.Operator, auth.Dev},
	corpusv1connect.IngressServiceCreateRouteProcedure: {auth.Operator},
	corpusv1connect.IngressServiceListRoutesProcedure:  {auth.Operator},
	corpusv1connect.IngressServiceDeleteRouteProcedure: {auth.Operator},
	corpusv1connect.IngressServiceMoveRouteProcedure:   {auth.Operator},
	// HTTPS: ops set routes' TLS and the cluster's ACME account (whose
	// view holds no key); anyone who reads routes sees certificates.
	corpusv1connect.IngressServiceSetRouteTlsProcedure:      {auth.Operator},
	corpusv1connect.IngressServiceSetAcmeProcedure:          {auth.Operator},
	corpusv1connect.IngressServiceGetAcmeProcedure:          {auth.Operator},
	corpusv1connect.IngressServiceRenewCertificateProcedure: {auth.Operator},
	corpusv1connect.AgentServiceTlsMaterialProcedure:        {auth.Agent},
	corpusv1connect.DnsServiceListRecordsProcedure:          {auth.Operator},
	corpusv1connect.DnsServiceAddRecordProcedure:            {auth.Operator},
	corpusv1connect.DnsServiceDeleteRecordProcedure:         {auth.Operator},
	corpusv1connect.VolumeServiceListVolumesProcedure:       {auth.Operator},
	corpusv1connect.VolumeServiceGetVolumeProcedure:         {auth.Operator},
	corpusv1connect.VolumeServiceDeleteVolumeProcedure:      {auth.Operator},
	corpusv1connect.VolumeServiceResizeVolumeProcedure:      {auth.Operator},
	corpusv1connect.VolumeServiceMoveVolumeProcedure:        {auth.Operator},
	corpusv1connect.VolumeServiceSnapshotVolumeProcedure:    {auth.Operator},
	corpusv1connect.VolumeServiceBackupVolumeProcedure:      {auth.Operator},
	corpusv1connect.VolumeServiceRestoreVolumeProcedure:     {auth.Operator},
	corpusv1connect.VolumeServiceUpdateVolumeProcedure:      {auth.Operator},
	corpusv1connect.AgentServiceEnrollProcedure:             auth.Public,
	corpusv1connect.AgentServiceWatchProcedure:              {auth.Agent},
	corpusv1connect.AgentServiceRenewCertificateProcedure:   {auth.Agent},
	corpusv1connect.AgentServiceReportProcedure:             {auth.Agent},
	corpusv1connect.AgentServiceGitAccessProcedure:          {auth.Agent},
	corpusv1connect.AgentServiceBeginReleaseProcedure:       {auth.Agent},
	corpusv1connect.AgentServiceFinishReleaseProcedure:      {auth.Agent},
	corpusv1connect.AgentServiceSetCurrentReleaseProcedure:  {auth.Agent},
	corpusv1connect.AgentServicePruneReleasesProcedure:      {auth.Agent},
	corpusv1connect.AgentServiceSetManifestDomainsProcedure: {auth.Agent},
	corpusv1connect.UserServiceCreateUserProcedure:          {auth.Operator},
	corpusv1connect.UserServiceListUsersProcedure:           {auth.Operator},
	corpusv1connect.UserServiceDeleteUserProcedure:          {auth.Operator},
	corpusv1connect.UserServiceAddKeyProcedure:              {auth.Operator},
	corpusv1connect.UserServiceDeleteKeyProcedure:           {auth.Operator},
	corpusv1connect.UserServiceCreateTokenProcedure:         users,
	corpusv1connect.UserServiceListTokensProcedure:          users,
	corpusv1connect.UserServiceRevokeTokenProcedure:         users,
	corpusv1connect.UserServiceLoginProcedure:               auth.Public,
	corpusv1connect.ProjectServiceCreateProjectProcedure:    {auth.Operator},
	// Export: whoever reads the project (values: ops and its devs, as
	// GetConfig reveals); import creates services and projects: ops.
	corpusv1connect.ProjectServiceExportProjectProcedure: users,
	corpusv1connect.ProjectServiceImportProjectProcedure: {auth.Operator},
	corpusv1connect.ProjectServiceListProjectsProcedure:  {auth.Operator},
	corpusv1connect.ProjectServiceGetProjectProcedure:    {auth.Operator},
	corpusv1connect.ProjectServiceDeleteProjectProcedure: {auth.Operator},
	corpusv1connect.ProjectServiceGrantProjectProcedure:  {auth.Operator},
	corpusv1connect.ProjectServiceListReleasesProcedure:  {auth.Operator},
	corpusv1connect.ProjectServiceGetReleaseProcedure:    {auth.Operator},
	corpusv1connect.ProjectServiceRollbackProcedure:      {auth.Operator},
	corpusv1connect.AuditServiceListAuditProcedure:       {auth.Operator},
	corpusv1connect.ClusterServiceRotateKeyringProcedure: {auth.Operator},
	corpusv1connect.ClusterServiceRotateCaProcedure:      {auth.Operator},
	corpusv1connect.ClusterServiceCaStatusProcedure:      {auth.Operator},
	// Extensions: operators only; agents lint the pushes they receive.
	corpusv1connect.ExtensionServiceAddExtensionProcedure:         {auth.Operator},
	corpusv1connect.ExtensionServiceListExtensionsProcedure:       {auth.Operator},
	corpusv1connect.ExtensionServiceGetExtensionProcedure:         {auth.Operator},
	corpusv1connect.ExtensionServiceSetExtensionDisabledProcedure: {auth.Operator},
	corpusv1connect.ExtensionServiceDeleteExtensionProcedure:      {auth.Operator},
	corpusv1connect.AgentServiceLintPushProcedure:                 {auth.Agent},
	// Registries' credentials: operators set them and see who did, never
	// the secret; agents get them opened for their own pulls (the
	// handler checks the node's guests).
	corpusv1connect.RegistryServiceLoginProcedure:            {auth.Operator},
	corpusv1connect.RegistryServiceListRegistriesProcedure:   {auth.Operator},
	corpusv1connect.RegistryServiceLogoutProcedure:           {auth.Operator},
	corpusv1connect.AgentServiceRegistryCredentialsProcedure: {auth.Agent},
	// The dashboard's blocking read of the index and its plots: the index
	// and the allocation and rates (of nodes and routes every user may
	// list) tell nothing a user may not read otherwise.
	corpusv1connect.ClusterServiceWaitProcedure:          users,
	corpusv1connect.ClusterServiceSeriesProcedure:        users,
	corpusv1connect.ProjectServiceSetConfigProcedure:     {auth.Operator},
	corpusv1connect.ProjectServiceGetConfigProcedure:     {auth.Operator},
	corpusv1connect.ProjectServiceDeployProcedure:        {auth.Operator},
	corpusv1connect.ProjectServiceListProcessesProcedure: {auth.Operator},
	corpusv1connect.AgentServiceSetWebPortProcedure:      {auth.Agent},
	corpusv1connect.ProjectServiceScaleProcedure:         {auth.Operator},
	corpusv1connect.ProjectServiceAutoscaleProcedure:     {auth.Operator},
	corpusv1connect.ProjectServiceSwitchBackProcedure:    {auth.Operator},
	corpusv1connect.AgentServiceSwitchEnvProcedure:       {auth.Agent},
	// Instances: the agent of instance 1 rolls the others; their agents
	// take the release and its source (each handler checks the node).
	corpusv1connect.AgentServiceRollInstanceProcedure:    {auth.Agent},
	corpusv1connect.AgentServiceInstanceReleaseProcedure: {auth.Agent},
	corpusv1connect.AgentServiceReleaseSourceProcedure:   {auth.Agent},
	corpusv1connect.AgentServiceRecordShellProcedure:     {auth.Agent},
	corpusv1connect.AgentServiceServiceRuntimeProcedure:  {auth.Agent},
	// Services: every user sees the templates; ops and devs make
	// services (a dev's are theirs) and act on those they may use, which
	// the handlers check; viewers read those linked to their projects.
	corpusv1connect.ServiceServiceListTemplatesProcedure:  users,
	corpusv1connect.ServiceServiceCreateServiceProcedure:  {auth.Operator, auth.Dev},
	corpusv1connect.ServiceServiceListServicesProcedure:   users,
	corpusv1connect.ServiceServiceGetServiceProcedure:     users,
	corpusv1connect.ServiceServiceListBackupsProcedure:    users,
	corpusv1connect.ServiceServiceDeleteServiceProcedure:  {auth.Operator, auth.Dev},
	corpusv1connect.ServiceServiceStartServiceProcedure:   {auth.Operator, auth.Dev},
	corpusv1connect.ServiceServiceStopServiceProcedure:    {auth.Operator, auth.Dev},
	corpusv1connect.ServiceServiceResizeServiceProcedure:  {auth.Operator, auth.Dev},
	corpusv1connect.ServiceServiceUpdateServiceProcedure:  {auth.Operator, auth.Dev},
	corpusv1connect.ServiceServiceLinkServiceProcedure:    {auth.Operator, auth.Dev},
	corpusv1connect.ServiceServiceUnlinkServiceProcedure:  {auth.Operator, auth.Dev},
	corpusv1connect.ServiceServiceBackupServiceProcedure:  {auth.Operator, auth.Dev},
	corpusv1connect.ServiceServiceRestoreServiceProcedure: {auth.Operator, auth.Dev},
	corpusv1connect.ServiceServiceExportBackupProcedure:   {auth.Operator, auth.Dev},
	corpusv1connect.ServiceServiceImportBackupProcedure:   {auth.Operator, auth.Dev},
	corpusv1connect.ServiceServiceDeleteBackupProcedure:   {auth.Operator, auth.Dev},

	// A snapshot holds the whole state: ops only (a follower relays).
	corpusv1connect.SnapshotServiceSaveSnapshotProcedure: {auth.Operator, auth.Coordinator},
	// A follower passes a restore on to the leader as a coordinator.
	corpusv1connect.SnapshotServiceRestoreSnapshotProcedure: {auth.Operator, auth.Coordinator},
}

// users are every kind of user; handlers narrow what each may touch.
var users = auth.Policy{auth.Operator, auth.Dev, auth.Viewer}

// readable are the reads devs and viewers may make (project-scoped ones
// are narrowed to their projects by the handlers); devWrites the writes
// devs may make on their projects.
var (
	readable = []string{
		corpusv1connect.ClusterServiceStatusProcedure,
		corpusv1connect.NodeServiceListNodesProcedure,
		corpusv1connect.NodeServiceGetNodeProcedure,
		corpusv1connect.GuestServiceGetGuestProcedure,
		corpusv1connect.GuestServiceListGuestsProcedure,
		corpusv1connect.IngressServiceListRoutesProcedure,
		corpusv1connect.DnsServiceListRecordsProcedure,
		corpusv1connect.VolumeServiceListVolumesProcedure,
		corpusv1connect.VolumeServiceGetVolumeProcedure,
		corpusv1connect.ProjectServiceListProjectsProcedure,
		corpusv1connect.ProjectServiceGetProjectProcedure,
		corpusv1connect.ProjectServiceListReleasesProcedure,
		corpusv1connect.ProjectServiceGetReleaseProcedure,
		// Viewers see keys only (GetConfig reveals to ops and devs).
		corpusv1connect.ProjectServiceGetConfigProcedure,
		corpusv1connect.ProjectServiceListProcessesProcedure,
	}
	devWrites = []string{
		corpusv1connect.ProjectServiceRollbackProcedure,
		corpusv1connect.ProjectServiceSetConfigProcedure,
		corpusv1connect.ProjectServiceDeployProcedure,
		corpusv1connect.ProjectServiceScaleProcedure,
		corpusv1connect.ProjectServiceAutoscaleProcedure,
		corpusv1connect.ProjectServiceSwitchBackProcedure,
		corpusv1connect.GuestServiceExecGuestProcedure,
		corpusv1connect.GuestServiceShellProcedure,
		corpusv1connect.GuestServiceStartGuestProcedure,
		corpusv1connect.GuestServiceStopGuestProcedure,
	}
)

func init() {
	for _, proc := range readable {
		Policies[proc] = append(slices.Clip(Policies[proc]), auth.Dev, auth.Viewer)
	}
	for _, proc := range devWrites {
		Policies[proc] = append(slices.Clip(Policies[proc]), auth.Dev)
	}
}

// maxRequestBytes bounds every request body.
const maxRequestBytes = 4 << 20

// compressMinBytes is the least size of an answer sent compressed to a
// client that accepts it: a gzip writer's reset alone costs more than
// sending a small answer as it is (it took 7 % of a leader's CPU under
// test/bench/raft's writes, each answer a few hundred bytes).
const compressMinBytes = 4 << 10

// Now is the time of day by the backend's clock, never before the
// cluster's (see state.Store.Now).
func (b *Backend) Now() time.Time { return b.Store.Now(b.Clock) }

// tokenUsed is what the authenticator tells of token uses (nil: none).
func (b *Backend) tokenUsed() func(tokenID, addr string) {
	if b.Uses == nil {
		return nil
	}
	return b.Uses.Use
}

// KeyUsed tells Uses, when set, that a node checked the SSH key with that
// fingerprint for a session from addr.
func (b *Backend) KeyUsed(fingerprint, addr string) {
	if b.Uses != nil {
		b.Uses.UseKey(fingerprint, addr)
	}
}

// Current is the state once this replica has caught up with every write
// acknowledged before the call (Group.ReadIndex, as a linearizable read
// does). A write handler about to succeed from the state alone (nothing
// to change, already there) asks it first, so that the answer is as
// linearizable as the writes: a follower that has not yet applied a
// write another client saw acknowledged must not answer as if it had
// not happened. (A NotFound is run again by currentNotFound.)
func (b *Backend) Current(ctx context.Context) (*state.Snap, error) {
	if b.Group != nil {
		if _, err := b.Group.ReadIndex(ctx); err != nil {
			return nil, ToConnect(err)
		}
	}
	return b.Store.Read(), nil
}

// Keyring is the cluster keyring the handlers seal and open with (nil
// before Mount).
func (b *Backend) Keyring() *keyring.Ring { return b.keyrings }

// Audit records what the state machine never sees (nil before Mount).
func (b *Backend) Audit() *audit.Auditor { return b.audit }

// Admission calls the admission extensions on writes (nil before Mount).
func (b *Backend) Admission() *admission.Controller { return b.admission }

// Options readies b for its handlers (the auditor, the keyring,
// admission) and returns the options every service is mounted with:
// the auth interceptor and the others, the request size bound.
func Options(b *Backend) []connect.HandlerOption {
	b.audit = audit.New(b, b.Logger)
	b.keyrings = keyring.New(b.Store, b.CA.Held, b)
	b.admission = &admission.Controller{Store: b.Store, Extensions: b.Extensions, Keyring: b.keyrings, Audit: b.audit, Logger: b.Logger}
	authn := &auth.Authenticator{Store: b.Store, Policies: Policies, Clock: b.Clock, Used: b.tokenUsed(), Refused: func(ctx context.Context, p auth.Principal, procedure string, req any, err error) {
		m, _ := req.(proto.Message)
		b.audit.Refused(ctx, p, procedure, m, err)
	}}
	interceptors := []connect.Interceptor{stopping{}, authn.Interceptor(), b.audit.Interceptor(), consistentReads{group: b.Group}, currentNotFound{group: b.Group}}
	if b.Metrics != nil {
		interceptors = append([]connect.Interceptor{b.Metrics.Interceptor()}, interceptors...)
	}
	return []connect.HandlerOption{
		connect.WithInterceptors(interceptors...),
		connect.WithReadMaxBytes(maxRequestBytes),
		connect.WithCompressMinBytes(compressMinBytes),
	}
}

// Write proposes a command and maps its error to an API error.
func (b *Backend) Write(ctx context.Context, cmd *corpusv1.Command) (uint64, error) {
	cmd.Actor = auth.FromContext(ctx).String()
	idx, err := b.Propose(ctx, cmd)
	if idx > 0 {
		audit.MarkWrote(ctx) // applied, refused or not: the state machine audited it
	}
	if err != nil {
		return idx, ToConnect(err)
	}
	return idx, nil
}

// ToConnect maps package errors to connect codes; the message is kept.
func ToConnect(err error) error {
	var ce *connect.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		return err
	case errors.Is(err, state.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, state.ErrExists):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, state.ErrInvalidToken):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, state.ErrInvalid), errors.Is(err, names.ErrInvalid), errors.Is(err, errInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, state.ErrBadTransition), errors.Is(err, state.ErrConflict), errors.Is(err, compat.ErrNeedsUpgrade):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, state.ErrPortTaken), errors.Is(err, state.ErrExhausted), errors.Is(err, state.ErrNoRoom):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, state.ErrStale):
		return connect.NewError(connect.CodeAborted, err)
	case errors.Is(err, ErrNotLeader):
		return rpc.Unavailable(err, corpusv1.RetryNotLeader)
	case errors.Is(err, ErrBusy):
		return rpc.Unavailable(err, corpusv1.RetryBusy)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	default:
		return connect.NewError(connect.CodeInternal, err)
	}
}

var errInvalid = errors.New("invalid argument")

// ErrNotLeader is what Backend.Propose should wrap when this replica
// cannot write; the API answers Unavailable.
var ErrNotLeader = errors.New("this coordinator is " + rpc.NotLeaderPhrase)

// ErrBusy is what Backend.Propose should wrap when the group is too busy
// to answer now, though a retry will do: the leader's write queue stayed
// full (the write did not happen), or this replica has not applied a
// write it passed on (it happened). The API answers Unavailable.
var ErrBusy = errors.New("the " + rpc.BusyPhrase)

func Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvalid}, args...)...)
}
