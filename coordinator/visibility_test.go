package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Load of the fake agent (see fakeAgent) says its proxy answered ten
// more requests of each test domain at every call, one in ten of them
// an error.
func (f *fakeAgent) Load(_ context.Context, req *connect.Request[corpusv1.LoadRequest]) (*connect.Response[corpusv1.LoadResponse], error) {
	if err := f.checkKey(req.Header()); err != nil {
		return nil, err
	}
	n := f.loads.Add(1)
	res := &corpusv1.LoadResponse{Requests: map[string]uint64{}, Errors: map[string]uint64{}}
	for _, d := range []string{"hello.example.test", "other.example.test"} {
		res.Requests[d], res.Errors[d] = 10*n, n
	}
	return connect.NewResponse(res), nil
}

// seen is what one caller finds on each surface: names by surface.
type seen map[string][]string

// listCall is one list of the API: its procedure and request, a
// response to decode its JSON into, and the names a response holds.
type listCall struct {
	surface, procedure string
	req                proto.Message
	res                func() proto.Message
	names              func(proto.Message) []string
}

// guestNames are the guests a list of them holds.
func guestNames(m proto.Message) (out []string) {
	for _, g := range m.(*corpusv1.ListGuestsResponse).Guests {
		out = append(out, g.Guest.Name)
	}
	return out
}

// lists are the API's lists of what a user may see, as the CLI and the
// dashboard call them.
var lists = []listCall{
	{"projects", corpusv1connect.ProjectServiceListProjectsProcedure,
		&corpusv1.ListProjectsRequest{},
		func() proto.Message { return &corpusv1.ListProjectsResponse{} },
		func(m proto.Message) (out []string) {
			for _, p := range m.(*corpusv1.ListProjectsResponse).Projects {
				out = append(out, p.Project.Name)
			}
			return out
		}},
	{"guests", corpusv1connect.GuestServiceListGuestsProcedure,
		&corpusv1.ListGuestsRequest{},
		func() proto.Message { return &corpusv1.ListGuestsResponse{} }, guestNames},
	{"guests on n1", corpusv1connect.GuestServiceListGuestsProcedure,
		&corpusv1.ListGuestsRequest{Node: "n1"},
		func() proto.Message { return &corpusv1.ListGuestsResponse{} }, guestNames},
	{"volumes", corpusv1connect.VolumeServiceListVolumesProcedure,
		&corpusv1.ListVolumesRequest{},
		func() proto.Message { return &corpusv1.ListVolumesResponse{} },
		func(m proto.Message) (out []string) {
			for _, v := range m.(*corpusv1.ListVolumesResponse).Volumes {
				out = append(out, v.Volume.Name)
			}
			return out
		}},
	{"services", corpusv1connect.ServiceServiceListServicesProcedure,
		&corpusv1.ListServicesRequest{},
		func() proto.Message { return &corpusv1.ListServicesResponse{} },
		func(m proto.Message) (out []string) {
			for _, v := range m.(*corpusv1.ListServicesResponse).Services {
				out = append(out, v.Service.Name)
			}
			return out
		}},
	{"routes", corpusv1connect.IngressServiceListRoutesProcedure,
		&corpusv1.ListRoutesRequest{},
		func() proto.Message { return &corpusv1.ListRoutesResponse{} },
		func(m proto.Message) (out []string) {
			res := m.(*corpusv1.ListRoutesResponse)
			for _, r := range res.Routes {
				out = append(out, r.Route.Domain)
			}
			for _, n := range res.Nat {
				out = append(out, "nat "+n.GuestName)
			}
			return out
		}},
	{"traffic", corpusv1connect.ClusterServiceSeriesProcedure,
		&corpusv1.SeriesRequest{},
		func() proto.Message { return &corpusv1.SeriesResponse{} },
		func(m proto.Message) (out []string) {
			for _, sr := range m.(*corpusv1.SeriesResponse).Series {
				if d := sr.Labels["domain"]; d != "" && !slices.Contains(out, d) {
					out = append(out, d)
				}
			}
			return out
		}},
	{"dns", corpusv1connect.DnsServiceListRecordsProcedure,
		&corpusv1.ListRecordsRequest{},
		func() proto.Message { return &corpusv1.ListRecordsResponse{} },
		func(m proto.Message) (out []string) {
			res := m.(*corpusv1.ListRecordsResponse)
			for _, r := range res.Records {
				name := strings.TrimSuffix(r.Name, "."+res.Zone)
				if strings.HasSuffix(name, ".guest") || name == "hello.dev" || name == "other.dev" || strings.HasSuffix(name, "._tcp.hello.dev") || strings.HasSuffix(name, "._tcp.other.dev") {
					if !slices.Contains(out, name) {
						out = append(out, name)
					}
				}
			}
			return out
		}},
}

// gets are the API's reads of one object, as show commands make them.
var gets = map[string]func(ctx context.Context, c clients, name string) error{
	"projects": func(ctx context.Context, c clients, name string) error {
		_, err := c.project.GetProject(ctx, connect.NewRequest(&corpusv1.GetProjectRequest{Name: name}))
		return err
	},
	"guests": func(ctx context.Context, c clients, name string) error {
		_, err := c.guests.GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: name}))
		return err
	},
	"volumes": func(ctx context.Context, c clients, name string) error {
		_, err := c.volumes.GetVolume(ctx, connect.NewRequest(&corpusv1.GetVolumeRequest{Name: name}))
		return err
	},
	"services": func(ctx context.Context, c clients, name string) error {
		_, err := c.service.GetService(ctx, connect.NewRequest(&corpusv1.GetServiceRequest{Name: name}))
		return err
	},
}

// TestOneReadModel: what a user sees is the same on every surface: the
// projects granted to them and what belongs to those projects (their
// guests, volumes, services and those linked to them, routes, traffic
// and DNS names), in every list and every get of the API, as the CLI
// and the dashboard call it. A viewer granted nothing sees nothing of
// the projects; an operator sees everything.
func TestOneReadModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// n1 reports once: a node timeout of an hour keeps it up (and its
	// names in the zone) however long a loaded machine takes.
	s := start(t, t.TempDir(), func(c *coordinator.Config) {
		c.SeriesInterval = 100 * time.Millisecond
		c.NodeTimeout = time.Hour
	})
	n1 := s.enroll("n1")
	n1.address = serveFakeAgent(t, s, n1)
	// An address and a proxy port: the node serves the environments'
	// names in the zone.
	if _, err := n1.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity(), Drivers: drivers(), AgentAddress: n1.address,
		AgentVersion: "test", Address: "127.0.0.1", ReservedPorts: []int32{18000}})); err != nil {
		t.Fatal(err)
	}
	ops := s.ops()
	for _, p := range []string{"hello", "other"} {
		if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: p, Env: "dev", Domains: []string{p + ".example.test"}})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "opsbox", Spec: &corpusv1.GuestSpec{Image: "busybox",
		Volume: &corpusv1.VolumeSpec{SizeBytes: 64 << 20, Path: "/data"}, Ports: []*corpusv1.Port{{HostPort: 18080, GuestPort: 80}}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "odb", Template: "postgresql", Project: "other"})); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "hpay", ExternalUrl: "https://pay.example.test", Project: "hello"})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("every guest placed, with its volume", func(v *state.Snap) bool {
		for _, g := range []string{"hello-dev", "other-dev", "opsbox", "svc-odb"} {
			if v.GuestByName(g).GetAddress() == "" || v.Volume(g).GetGuestId() == "" {
				return false
			}
		}
		return true
	})
	if err := drain(ops.service.LinkService(ctx, connect.NewRequest(&corpusv1.LinkServiceRequest{Service: "odb", Project: "hello", Env: "dev", NoRestart: true}))); err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{"ops": s.OpsToken()}
	for _, u := range []struct{ name, role, project string }{{"alice", "dev", "hello"}, {"bob", "dev", "other"}, {"val", "viewer", "hello"}, {"nina", "viewer", ""}} {
		tokens[u.name] = s.userToken(u.name, u.role, 0)
		if u.project != "" {
			if _, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: u.project, User: u.name})); err != nil {
				t.Fatal(err)
			}
		}
	}
	// list calls l over HTTP as b, with the extra header h, and returns
	// the names its answer holds, sorted.
	list := func(b *browser, l listCall, h ...string) ([]string, error) {
		body, _ := protojson.Marshal(l.req)
		res, out := b.do("POST", l.procedure, json.RawMessage(body), h...)
		m := l.res()
		if res.StatusCode != 200 {
			return nil, fmt.Errorf("%d %s", res.StatusCode, out)
		}
		if err := protojson.Unmarshal([]byte(out), m); err != nil {
			return nil, err
		}
		names := l.names(m)
		slices.Sort(names)
		return names, nil
	}
	// The proxies are sampled while someone reads the series.
	eventuallyT(t, "both domains' traffic sampled", func() error {
		if got, err := list(s.browser(t), lists[6], "Authorization", "Bearer "+s.OpsToken()); err != nil || len(got) != 2 {
			return fmt.Errorf("traffic series of %v, %v", got, err)
		}
		return nil
	})

	// The projects' names are in the zone once their node is published
	// (a loaded machine may have a report arrive late).
	eventuallyT(t, "the projects' names in the zone", func() error {
		for _, l := range lists {
			if l.surface != "dns" {
				continue
			}
			got, err := list(s.browser(t), l, "Authorization", "Bearer "+s.OpsToken())
			if err != nil || !slices.Contains(got, "hello.dev") || !slices.Contains(got, "other.dev") {
				return fmt.Errorf("ops's dns = %v, %v", got, err)
			}
		}
		return nil
	})

	helloSees := seen{
		"projects": {"hello"}, "guests": {"hello-dev", "svc-odb"}, "guests on n1": {"hello-dev", "svc-odb"}, "volumes": {"hello-dev", "svc-odb"},
		"services": {"hpay", "odb"}, "routes": {"hello.example.test"}, "traffic": {"hello.example.test"},
		"dns": {"_http._tcp.hello.dev", "hello-dev.guest", "hello.dev", "svc-odb.guest"},
	}
	want := map[string]seen{
		"ops": {
			"projects": {"hello", "other"}, "guests": {"hello-dev", "opsbox", "other-dev", "svc-odb"}, "guests on n1": {"hello-dev", "opsbox", "other-dev", "svc-odb"},
			"volumes": {"hello-dev", "opsbox", "other-dev", "svc-odb"}, "services": {"hpay", "odb"},
			"routes": {"hello.example.test", "nat opsbox", "other.example.test"}, "traffic": {"hello.example.test", "other.example.test"},
			"dns": {"_http._tcp.hello.dev", "_http._tcp.other.dev", "hello-dev.guest", "hello.dev", "opsbox.guest", "other-dev.guest", "other.dev", "svc-odb.guest"},
		},
		"alice": helloSees,
		"val":   helloSees,
		"bob": {
			"projects": {"other"}, "guests": {"other-dev", "svc-odb"}, "guests on n1": {"other-dev", "svc-odb"}, "volumes": {"other-dev", "svc-odb"},
			"services": {"odb"}, "routes": {"other.example.test"}, "traffic": {"other.example.test"},
			"dns": {"_http._tcp.other.dev", "other-dev.guest", "other.dev", "svc-odb.guest"},
		},
		"nina": {},
	}
	for _, who := range slices.Sorted(maps.Keys(want)) {
		// The API with the user's token, as the CLI and curl call it.
		for _, l := range lists {
			got, err := list(s.browser(t), l, "Authorization", "Bearer "+tokens[who])
			if err != nil || !slices.Equal(got, want[who][l.surface]) {
				t.Errorf("%s's %s = %v, %v; want %v", who, l.surface, got, err, want[who][l.surface])
			}
		}
		// A get answers for what the lists show, and refuses the rest.
		for surface, get := range gets {
			for _, name := range want["ops"][surface] {
				err := get(ctx, s.clients(tokens[who]), name)
				if visible := slices.Contains(want[who][surface], name); visible && err != nil || !visible && codeOf(err) != connect.CodePermissionDenied {
					t.Errorf("%s gets %s %s = %v; want it %s", who, surface, name, err, map[bool]string{true: "answered", false: "refused"}[visible])
				}
			}
		}
	}

	// The dashboard: the same calls with a session of the page.
	for _, who := range []string{"val", "nina"} {
		b := s.browser(t)
		if res, _ := b.login(map[string]string{"token": tokens[who]}); res.StatusCode != 200 {
			t.Fatalf("%s's dashboard login: %d", who, res.StatusCode)
		}
		for _, l := range lists {
			got, err := list(b, l)
			if err != nil || !slices.Equal(got, want[who][l.surface]) {
				t.Errorf("%s's dashboard %s = %v, %v; want %v", who, l.surface, got, err, want[who][l.surface])
			}
		}
	}
}
