package coordinator_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/extensions"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
)

// hooks is a webhook server of the test's own: each path is an
// extension, over TLS that asks for the coordinator's certificate.
type hooks struct {
	t      *testing.T
	srv    *httptest.Server
	ca     string
	mu     sync.Mutex
	calls  []string // paths, in the order called
	last   map[string]*http.Request
	bodies map[string][]byte
	verify *extensions.Verifier
	hang   chan struct{}
}

func newHooks(t *testing.T, clientCAs *x509.CertPool) *hooks {
	h := &hooks{t: t, last: map[string]*http.Request{}, bodies: map[string][]byte{}, hang: make(chan struct{}),
		verify: &extensions.Verifier{Secret: []byte("a-shared-secret-of-the-test"), Window: time.Minute}}
	h.srv = httptest.NewUnstartedServer(http.HandlerFunc(h.serve))
	// Mutual TLS: only a client with a certificate of the cluster CA
	// (a coordinator replica) gets an answer.
	h.srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs}
	h.srv.StartTLS()
	t.Cleanup(func() { close(h.hang); h.srv.Close() })
	h.ca = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h.srv.Certificate().Raw}))
	return h
}

type hookRequest struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	User       string         `json:"user"`
	Object     map[string]any `json:"object"`
	Image      map[string]any `json:"image"`
}

func (h *hooks) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.calls = append(h.calls, r.URL.Path)
	h.last[r.URL.Path], h.bodies[r.URL.Path] = r.Clone(context.Background()), body
	h.mu.Unlock()
	var req hookRequest
	if err := json.Unmarshal(body, &req); err != nil || req.APIVersion != extensions.APIVersion {
		http.Error(w, "bad payload", http.StatusBadRequest)
		return
	}
	obj := req.Object
	spec, _ := obj["spec"].(map[string]any)
	answer := func(allowed bool, msg string, obj map[string]any) {
		json.NewEncoder(w).Encode(map[string]any{"allowed": allowed, "message": msg, "object": obj})
	}
	switch r.URL.Path {
	case "/memory": // a default memory per guest
		if spec == nil {
			spec = map[string]any{}
			obj["spec"] = spec
		}
		res, _ := spec["resources"].(map[string]any)
		if res == nil {
			res = map[string]any{}
			spec["resources"] = res
		}
		if _, set := res["memoryBytes"]; !set {
			res["memoryBytes"] = "134217728"
		}
		answer(true, "", obj)
	case "/team": // a label every guest gets
		env, _ := spec["env"].(map[string]any)
		if env == nil {
			env = map[string]any{}
			spec["env"] = env
		}
		env["TEAM"] = "platform"
		answer(true, "", obj)
	case "/noop":
		answer(true, "", nil)
	case "/images": // an image allow-list
		if img, _ := spec["image"].(string); img != "busybox" {
			answer(false, "image "+img+" is not on the allow-list (busybox)", nil)
			return
		}
		answer(true, "", nil)
	case "/prod-owner": // prod guests need an OWNER
		env, _ := spec["env"].(map[string]any)
		if name, _ := obj["name"].(string); strings.HasPrefix(name, "prod-") && env["OWNER"] == nil {
			answer(false, "prod guests need an OWNER label", nil)
			return
		}
		answer(true, "", nil)
	case "/env-memory": // a default memory per environment
		mem := map[string]string{"dev": "67108864", "prod": "536870912"}[obj["env"].(string)]
		res, _ := obj["resources"].(map[string]any)
		if res == nil {
			res = map[string]any{}
			obj["resources"] = res
		}
		res["memoryBytes"] = mem
		answer(true, "", obj)
	case "/seen":
		answer(true, "", nil)
	case "/registries": // images from one registry alone
		if reg, _ := req.Image["registry"].(string); req.Image != nil && reg != "registry.allowed.test" {
			answer(false, "registry "+reg+" is not allowed", nil)
			return
		}
		answer(true, "", nil)
	case "/digests": // images pinned by digest
		if d, _ := req.Image["digest"].(string); req.Image != nil && d == "" {
			answer(false, fmt.Sprintf("image %v has no digest: name it by @sha256:", req.Image["reference"]), nil)
			return
		}
		answer(true, "", nil)
	case "/breaks-name":
		obj["name"] = "Not A Name!"
		answer(true, "", obj)
	case "/signed":
		if err := h.verify.Verify(r.Header.Get(extensions.SignatureHeader), body, time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		answer(true, "", nil)
	case "/hang":
		select {
		case <-h.hang:
		case <-r.Context().Done():
		}
	case "/garbage":
		w.Write([]byte("<html>oops</html>"))
	case "/huge":
		w.Write([]byte(`{"allowed": true, "message": "` + strings.Repeat("x", extensions.MaxAnswerBytes) + `"}`))
	}
}

func (h *hooks) called() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.calls
	h.calls = nil
	return out
}

func (h *hooks) ext(name, kind, path string, mod ...func(*corpusv1.Extension)) *corpusv1.Extension {
	e := &corpusv1.Extension{Name: name, Url: h.srv.URL + path, CaPem: h.ca, Kind: kind, On: []string{corpusv1.OnGuestCreate}, TimeoutMs: 2000}
	for _, m := range mod {
		m(e)
	}
	return e
}

// TestExtensions: extensions called over mutual TLS before a guest is
// created: mutating ones in their declared order, each seeing the one
// before, then validating ones; a refusal or an invalid mutation changes
// nothing and names the extension; failures follow the failure policy;
// signed calls verify and cannot be replayed; a follower replica calls
// them as the leader does.
func TestExtensions(t *testing.T) {
	t.Parallel()
	rs := startGroupNamed(t, "x", 3)
	leaderID := rs.leader()
	var followerID string
	for id := range rs.reps {
		if id != leaderID {
			followerID = id
		}
	}
	leader := rs.reps[leaderID]
	ctx := context.Background()
	ops := rs.ops(leaderID)
	h := newHooks(t, leader.caPool())
	add := func(e *corpusv1.Extension, secret string) error {
		_, err := ops.ext.AddExtension(ctx, connect.NewRequest(&corpusv1.AddExtensionRequest{Extension: e, Secret: secret}))
		return err
	}
	mustAdd := func(e *corpusv1.Extension) {
		t.Helper()
		if err := add(e, ""); err != nil {
			t.Fatalf("adding %s: %v", e.Name, err)
		}
	}
	// Order: memory (priority 10) before noop (priority 0); team after
	// memory, though its priority is the highest.
	mustAdd(h.ext("noop", corpusv1.ExtensionMutate, "/noop"))
	mustAdd(h.ext("memory", corpusv1.ExtensionMutate, "/memory", func(e *corpusv1.Extension) { e.Priority = 10 }))
	mustAdd(h.ext("team", corpusv1.ExtensionMutate, "/team", func(e *corpusv1.Extension) { e.Priority = 99; e.After = []string{"noop"} }))
	mustAdd(h.ext("images", corpusv1.ExtensionValidate, "/images"))
	mustAdd(h.ext("prod-owner", corpusv1.ExtensionValidate, "/prod-owner", func(e *corpusv1.Extension) {
		e.On = []string{corpusv1.OnGuestCreate, corpusv1.OnGuestUpdate}
	}))
	// The same extension added again (a retry whose first answer was
	// lost) is done already; another one under its name is refused.
	if err := add(h.ext("noop", corpusv1.ExtensionMutate, "/noop"), ""); err != nil {
		t.Errorf("adding noop again, unchanged: %v", err)
	}
	if err := add(h.ext("noop", corpusv1.ExtensionMutate, "/noop", func(e *corpusv1.Extension) { e.Priority = 5 }), ""); codeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("adding noop again with another priority: %v, want already_exists", err)
	}
	// A cycle is refused, named, and changes nothing.
	err := add(h.ext("loop", corpusv1.ExtensionMutate, "/noop", func(e *corpusv1.Extension) { e.After = []string{"team"}; e.Before = []string{"noop"} }), "")
	if codeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "loop -> noop -> team -> loop") {
		t.Errorf("a cycle: %v", err)
	}
	list, err := ops.ext.ListExtensions(ctx, connect.NewRequest(&corpusv1.ListExtensionsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, v := range list.Msg.Extensions {
		order = append(order, v.Extension.Name)
	}
	if got := strings.Join(order, " "); got != "memory noop team images prod-owner" {
		t.Errorf("extensions listed %q", got)
	}

	create := func(c clients, name, image string, env map[string]string) (*corpusv1.Guest, error) {
		res, err := c.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: name, Spec: &corpusv1.GuestSpec{Image: image, Env: env}}))
		if err != nil {
			return nil, err
		}
		return res.Msg.Guest, nil
	}
	g, err := create(ops, "web", "busybox", nil)
	if err != nil {
		t.Fatalf("creating web: %v", err)
	}
	// Each try of the write calls the extensions once more: under load
	// an election can make the client send it again.
	calls := h.called()
	for i := 0; i == 0 || i < len(calls); i += 5 {
		round := strings.Join(calls[i:min(i+5, len(calls))], " ")
		if round != "/memory /noop /team /images /prod-owner" && round != "/memory /noop /team /prod-owner /images" {
			t.Errorf("calls %q: want the mutators in order, then the validators, for each try of the write", calls)
			break
		}
	}
	if g.Spec.GetResources().GetMemoryBytes() != 128<<20 || g.Spec.GetEnv()["TEAM"] != "platform" {
		t.Errorf("web as created: %v", g.Spec)
	}
	var who []string
	for _, c := range g.Admission {
		who = append(who, c.Extension+":"+c.Field+"="+c.Value)
	}
	if got := strings.Join(who, " "); got != `memory:spec.resources.memoryBytes="134217728" team:spec.env.TEAM="platform"` {
		t.Errorf("who set what: %s", got)
	}
	// The validators saw the mutated object.
	var seen hookRequest
	json.Unmarshal(h.bodies["/images"], &seen)
	if seen.Kind != corpusv1.OnGuestCreate || seen.User != "ops" || seen.Object["spec"].(map[string]any)["env"].(map[string]any)["TEAM"] != "platform" {
		t.Errorf("the validator's payload: %+v", seen)
	}

	// Refusals name the extension, and nothing is created.
	if _, err := create(ops, "evil", "evil/miner", nil); codeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "extension images: image evil/miner is not on the allow-list") {
		t.Errorf("a refused image: %v", err)
	}
	if _, err := create(ops, "prod-db", "busybox", nil); codeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "prod-owner") {
		t.Errorf("a prod guest without an owner: %v", err)
	}
	if _, err := create(ops, "prod-api", "busybox", map[string]string{"OWNER": "kim"}); err != nil {
		t.Errorf("a prod guest with an owner: %v", err)
	}
	// Nor can an update take the owner away.
	_, err = ops.guests.UpdateGuest(ctx, connect.NewRequest(&corpusv1.UpdateGuestRequest{Name: "prod-api", UnsetEnv: []string{"OWNER"}}))
	if codeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "guest.update refused by extension prod-owner") {
		t.Errorf("an update dropping the owner: %v", err)
	}
	if env := leader.Store().Read().GuestByName("prod-api").GetSpec().GetEnv(); env["OWNER"] != "kim" {
		t.Errorf("prod-api's env after a refused update: %v", env)
	}
	if _, err := ops.guests.UpdateGuest(ctx, connect.NewRequest(&corpusv1.UpdateGuestRequest{Name: "prod-api", SetEnv: map[string]string{"LOG": "debug"}})); err != nil {
		t.Errorf("an update keeping the owner: %v", err)
	}
	// An invalid mutation is refused as invalid input.
	mustAdd(h.ext("breaks-name", corpusv1.ExtensionMutate, "/breaks-name", func(e *corpusv1.Extension) { e.Priority = -1 }))
	if _, err := create(ops, "victim", "busybox", nil); codeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "extension breaks-name made the guest.create invalid") {
		t.Errorf("an invalid mutation: %v", err)
	}
	deleteExtension(t, ops, "breaks-name")
	for _, n := range []string{"evil", "prod-db", "victim"} {
		if leader.Store().Read().GuestByName(n) != nil {
			t.Errorf("refused guest %s exists", n)
		}
	}

	// A follower calls the extensions itself, before it passes the write
	// on, with the same result.
	eventuallyT(t, "the follower applies the deletion", func() error {
		if rs.reps[followerID].Store().Read().Extension("breaks-name") != nil {
			return errors.New("breaks-name still there")
		}
		return nil
	})
	g2, err := create(rs.ops(followerID), "via-follower", "busybox", nil)
	if err != nil || g2.GetSpec().GetEnv()["TEAM"] != "platform" || len(g2.GetAdmission()) != 2 {
		t.Errorf("a create through follower %s: %v, %v", followerID, g2, err)
	}
	if _, err := create(rs.ops(followerID), "evil2", "evil/miner", nil); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a refused create through the follower: %v", err)
	}

	// Failures: fail refuses the write naming the extension, ignore goes
	// on and is audited; neither holds other writes.
	for _, path := range []string{"/hang", "/garbage", "/huge", "/down"} {
		name := "x" + strings.TrimPrefix(path, "/")
		e := h.ext(name, corpusv1.ExtensionValidate, path, func(e *corpusv1.Extension) { e.TimeoutMs = 300 })
		if path == "/down" {
			e.Url = "https://127.0.0.1:1/down"
		}
		mustAdd(e)
		start := time.Now()
		if _, err := create(ops, "f"+name, "busybox", nil); codeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "extension "+name) || !strings.Contains(err.Error(), "failure policy is fail") {
			t.Errorf("%s under fail: %v", path, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s under fail took %s", path, d)
		}
		// Other writes go on meanwhile (not a guest: no extension).
		if _, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: "none", User: "x"})); codeOf(err) == connect.CodeUnavailable {
			t.Errorf("another write during %s: %v", path, err)
		}
		e.FailurePolicy = corpusv1.FailurePolicyIgnore
		if _, err := ops.ext.AddExtension(ctx, connect.NewRequest(&corpusv1.AddExtensionRequest{Extension: e, Replace: true})); err != nil {
			t.Fatal(err)
		}
		if _, err := create(ops, "i"+name, "busybox", nil); err != nil {
			t.Errorf("%s under ignore: %v", path, err)
		}
		if _, err := ops.ext.SetExtensionDisabled(ctx, connect.NewRequest(&corpusv1.SetExtensionDisabledRequest{Name: name, Disabled: true})); err != nil {
			t.Fatal(err)
		}
	}
	audit, err := ops.audit.ListAudit(ctx, connect.NewRequest(&corpusv1.ListAuditRequest{Action: "extension_failed", Limit: 100}))
	if err != nil || len(audit.Msg.Entries) < 4 {
		t.Errorf("ignored failures in the audit log: %v, %v", audit, err)
	}
	refusals, err := ops.audit.ListAudit(ctx, connect.NewRequest(&corpusv1.ListAuditRequest{Limit: 1000}))
	found := false
	for _, e := range refusals.Msg.Entries {
		found = found || strings.Contains(e.Result, "refused by extension images")
	}
	if err != nil || !found {
		t.Errorf("an extension's refusal is not in the audit log (%v)", err)
	}

	// Signed calls: the extension verifies each, and a replay of one is
	// refused.
	if err := add(h.ext("signed", corpusv1.ExtensionValidate, "/signed"), "short"); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a 5-byte secret: %v", err)
	}
	if err := add(h.ext("signed", corpusv1.ExtensionValidate, "/signed"), string(h.verify.Secret)); err != nil {
		t.Fatal(err)
	}
	got, err := ops.ext.GetExtension(ctx, connect.NewRequest(&corpusv1.GetExtensionRequest{Name: "signed"}))
	if err != nil || !got.Msg.Extension.Signed || len(got.Msg.Extension.Extension.Secret) != 0 {
		t.Errorf("the signed extension as shown: %v, %v", got, err)
	}
	if _, err := create(ops, "signed-ok", "busybox", nil); err != nil {
		t.Fatalf("a signed call: %v", err)
	}
	h.mu.Lock()
	orig, body := h.last["/signed"], h.bodies["/signed"]
	h.mu.Unlock()
	replay, _ := http.NewRequest("POST", h.srv.URL+"/signed", strings.NewReader(string(body)))
	replay.Header = orig.Header.Clone()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:      h.srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs,
		Certificates: []tls.Certificate{*leader.issue("coordinator", "replayer", time.Hour)},
	}}}
	res, err := hc.Do(replay)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(string(msg), extensions.ErrReplayed.Error()) {
		t.Errorf("a replayed call: %d %s", res.StatusCode, msg)
	}
	// Without the coordinator's certificate, the extension does not answer.
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h.srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}}}
	if res, err := plain.Post(h.srv.URL+"/noop", "application/json", strings.NewReader("{}")); err == nil {
		res.Body.Close()
		t.Error("the test's extension answered a client without a certificate")
	}

	// Projects and services: a default memory per environment; a
	// service's secrets reach extensions as names alone.
	mustAdd(h.ext("env-memory", corpusv1.ExtensionMutate, "/env-memory", func(e *corpusv1.Extension) { e.On = []string{corpusv1.OnProjectCreate} }))
	mustAdd(h.ext("seen", corpusv1.ExtensionValidate, "/seen", func(e *corpusv1.Extension) { e.On = []string{corpusv1.OnServiceCreate} }))
	for env, want := range map[string]int64{"dev": 64 << 20, "prod": 512 << 20} {
		res, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "shop", Env: env, Image: "busybox"}))
		if err != nil {
			t.Fatalf("creating shop/%s: %v", env, err)
		}
		g := leader.Store().Read().GuestByName("shop-" + env)
		if g.Spec.GetResources().GetMemoryBytes() != want || len(g.Admission) == 0 || g.Admission[0].Extension != "env-memory" {
			t.Errorf("shop-%s: memory %d, admission %v", env, g.Spec.GetResources().GetMemoryBytes(), g.Admission)
		}
		if len(res.Msg.Project.Admission) == 0 {
			t.Errorf("shop's project record lacks who set what: %v", res.Msg.Project)
		}
	}
	if _, err := ops.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "mail", ExternalUrl: "https://mail.example", Secrets: map[string]string{"API_KEY": "s3cret-planted"}})); err != nil {
		t.Fatalf("an external service: %v", err)
	}
	h.mu.Lock()
	sent := string(h.bodies["/seen"])
	h.mu.Unlock()
	if strings.Contains(sent, "s3cret-planted") || !strings.Contains(sent, "API_KEY") {
		t.Errorf("what service.create's extension saw: %s", sent)
	}
	if v, err := ops.service.GetService(ctx, connect.NewRequest(&corpusv1.GetServiceRequest{Name: "mail"})); err != nil || !slices.Equal(v.Msg.Service.GetSecretKeys(), []string{"API_KEY"}) {
		t.Errorf("the service's secrets after admission: %v, %v", v, err)
	}
	for _, n := range []string{"env-memory", "seen"} {
		deleteExtension(t, ops, n)
	}

	// Disabled and deleted extensions are not called.
	for _, n := range []string{"memory", "noop", "team", "prod-owner", "signed"} {
		deleteExtension(t, ops, n)
	}
	if _, err := ops.ext.SetExtensionDisabled(ctx, connect.NewRequest(&corpusv1.SetExtensionDisabledRequest{Name: "images", Disabled: true})); err != nil {
		t.Fatal(err)
	}
	h.called()
	if _, err := create(ops, "plain", "debian/bookworm", nil); err != nil {
		t.Errorf("with every extension off: %v", err)
	}
	if c := h.called(); len(c) != 0 {
		t.Errorf("extensions called while off: %v", c)
	}
	if _, err := ops.ext.GetExtension(ctx, connect.NewRequest(&corpusv1.GetExtensionRequest{Name: "memory"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("a deleted extension: %v", err)
	}
}

// deleteExtension deletes an extension as the CLI does: a "not found"
// that says an earlier try, cut short by a leader change, may have
// deleted it (rpc.Gone) is what was asked for. Under load the group's
// leader steps down now and then, and the client's retry of a delete
// that was committed finds nothing left.
func deleteExtension(t *testing.T, ops clients, name string) {
	t.Helper()
	if _, err := ops.ext.DeleteExtension(t.Context(), connect.NewRequest(&corpusv1.DeleteExtensionRequest{Name: name})); err != nil && !rpc.Gone(err) {
		t.Fatalf("deleting extension %s: %v", name, err)
	}
}
