// Package serve mounts every service of the coordinator's API: the
// handlers of coordinator/api's packages per noun, all behind the same
// interceptors, AgentService joined from the part each one serves.
package serve

import (
	"net/http"

	"corpus/coordinator/api"
	"corpus/coordinator/api/agents"
	"corpus/coordinator/api/auditlog"
	"corpus/coordinator/api/cluster"
	"corpus/coordinator/api/extension"
	"corpus/coordinator/api/guests"
	"corpus/coordinator/api/nodes"
	"corpus/coordinator/api/projects"
	"corpus/coordinator/api/records"
	"corpus/coordinator/api/registries"
	"corpus/coordinator/api/routes"
	"corpus/coordinator/api/services"
	"corpus/coordinator/api/snapshot"
	"corpus/coordinator/api/users"
	"corpus/coordinator/api/volumes"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Mount registers every service on mux behind the auth interceptor.
func Mount(mux *http.ServeMux, b *api.Backend) {
	opts := api.Options(b)
	b.Guests, b.Volumes, b.Services = guests.New(b), volumes.New(b), services.New(b)
	projectService := projects.New(b)
	b.Releases = projectService
	mux.Handle(corpusv1connect.NewClusterServiceHandler(cluster.New(b), opts...))
	mux.Handle(corpusv1connect.NewIngressServiceHandler(routes.New(b), opts...))
	mux.Handle(corpusv1connect.NewGuestServiceHandler(b.Guests, opts...))
	mux.Handle(corpusv1connect.NewVolumeServiceHandler(b.Volumes, opts...))
	mux.Handle(corpusv1connect.NewUserServiceHandler(users.New(b), opts...))
	mux.Handle(corpusv1connect.NewExtensionServiceHandler(extension.New(b), opts...))
	mux.Handle(corpusv1connect.NewAuditServiceHandler(auditlog.New(b), opts...))
	mux.Handle(corpusv1connect.NewDnsServiceHandler(records.New(b), opts...))
	mux.Handle(corpusv1connect.NewNodeServiceHandler(nodes.New(b), opts...))
	mux.Handle(corpusv1connect.NewServiceServiceHandler(b.Services, opts...))
	mux.Handle(corpusv1connect.NewProjectServiceHandler(projectService, opts...))
	mux.Handle(corpusv1connect.NewSnapshotServiceHandler(snapshot.New(b), opts...))
	mux.Handle(corpusv1connect.NewRegistryServiceHandler(registries.New(b), opts...))
	mux.Handle(corpusv1connect.NewAgentServiceHandler(agentService{agents.New(b), services.NewRuntime(b), projects.NewAgent(b), registries.NewCredentials(b)}, opts...))
}

// agentService is AgentService: each package serves the agents' calls
// about its noun.
type agentService struct {
	*agents.Service
	*services.Runtime
	*projects.Agent
	*registries.Credentials
}
