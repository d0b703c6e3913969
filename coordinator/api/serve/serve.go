// Package serve mounts every service of the coordinator's API: the
// handlers of package api and those of its packages per noun, all
// behind the same interceptors.
package serve

import (
	"net/http"

	"corpus/coordinator/api"
	"corpus/coordinator/api/auditlog"
	"corpus/coordinator/api/extension"
	"corpus/coordinator/api/guests"
	"corpus/coordinator/api/nodes"
	"corpus/coordinator/api/records"
	"corpus/coordinator/api/routes"
	"corpus/coordinator/api/snapshot"
	"corpus/coordinator/api/users"
	"corpus/coordinator/api/volumes"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Mount registers every service on mux behind the auth interceptor.
func Mount(mux *http.ServeMux, b *api.Backend) {
	opts := api.Options(b)
	b.Guests, b.Volumes = guests.New(b), volumes.New(b)
	api.Mount(mux, b, opts)
	mux.Handle(corpusv1connect.NewIngressServiceHandler(routes.New(b), opts...))
	mux.Handle(corpusv1connect.NewGuestServiceHandler(b.Guests, opts...))
	mux.Handle(corpusv1connect.NewVolumeServiceHandler(b.Volumes, opts...))
	mux.Handle(corpusv1connect.NewUserServiceHandler(users.New(b), opts...))
	mux.Handle(corpusv1connect.NewExtensionServiceHandler(extension.New(b), opts...))
	mux.Handle(corpusv1connect.NewAuditServiceHandler(auditlog.New(b), opts...))
	mux.Handle(corpusv1connect.NewDnsServiceHandler(records.New(b), opts...))
	mux.Handle(corpusv1connect.NewNodeServiceHandler(nodes.New(b), opts...))
	mux.Handle(corpusv1connect.NewSnapshotServiceHandler(snapshot.New(b), opts...))
}
