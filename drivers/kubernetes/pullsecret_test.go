package kubernetes

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"corpus/drivers"
	"corpus/internal/k8stest"
	"corpus/internal/testrun"
)

// logins is a keychain of registries' logins the test changes, as
// corpus registry login and logout change the agent's; while unknown,
// it cannot tell (as the agent's while no coordinator answers).
type logins struct {
	mu      sync.Mutex
	creds   map[string]authn.AuthConfig
	err     error
	unknown bool
	asked   int
}

func (l *logins) ResolveKnown(_ context.Context, r authn.Resource) (authn.Authenticator, bool, error) {
	l.mu.Lock()
	unknown := l.unknown
	l.mu.Unlock()
	if unknown {
		return nil, false, nil
	}
	a, err := l.Resolve(r)
	return a, true, err
}

func (l *logins) Resolve(r authn.Resource) (authn.Authenticator, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked++
	if l.err != nil {
		return nil, l.err
	}
	if c, ok := l.creds[r.RegistryStr()]; ok {
		return authn.FromConfig(c), nil
	}
	return authn.Anonymous, nil
}

func (l *logins) set(registry string, c *authn.AuthConfig) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c == nil {
		delete(l.creds, registry)
		return
	}
	l.creds[registry] = *c
}

// TestPullSecrets: a guest whose image is in a registry with a login
// runs with that registry's pull secret, which follows the login: a new
// password, a secret deleted by hand, a logout, an agent restarted
// after one; a guest of a registry without a login has none.
func TestPullSecrets(t *testing.T) {
	c := k8stest.Start(t)
	keys := &logins{creds: map[string]authn.AuthConfig{}}
	// Asking the keychain at every Create, so the test sees each change
	// at once; the reuse of its answers is checked at the end.
	newDriver := func() *Driver {
		d, err := New(Config{REST: c.Config, NamespacePrefix: "corpus-", Node: "pull", Keychain: keys, CredentialsTTL: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	d := newDriver()
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(2*time.Minute))
	defer cancel()
	secrets := c.Client.CoreV1().Secrets(d.Namespace())
	const registry = "registry.example:5000"
	name := pullSecretName(registry)
	create := func(d *Driver, s drivers.GuestSpec) {
		t.Helper()
		if err := d.Create(ctx, s, nil); err != nil {
			t.Fatalf("Create(%s) = %v", s.Name, err)
		}
	}
	pullSecretsOf := func(guest string) []corev1.LocalObjectReference {
		t.Helper()
		dep, err := c.Client.AppsV1().Deployments(d.Namespace()).Get(ctx, guest, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return dep.Spec.Template.Spec.ImagePullSecrets
	}
	// wantAuth checks the registry's secret holds user and password.
	wantAuth := func(key, user, password string) {
		t.Helper()
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the pull secret: %v", err)
		}
		if s.Type != corev1.SecretTypeDockerConfigJson {
			t.Errorf("the pull secret's type is %q", s.Type)
		}
		var cfg struct {
			Auths map[string]struct{ Username, Password, Auth string } `json:"auths"`
		}
		if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
			t.Fatalf("the pull secret's %s: %v", corev1.DockerConfigJsonKey, err)
		}
		a := cfg.Auths[key]
		if a.Username != user || a.Password != password || a.Auth != base64.StdEncoding.EncodeToString([]byte(user+":"+password)) {
			t.Errorf("the pull secret holds %+v for %s, want %s/%s", cfg.Auths, key, user, password)
		}
	}
	wantRefs := func(guest, secret string) {
		t.Helper()
		refs := pullSecretsOf(guest)
		switch {
		case secret == "" && len(refs) != 0:
			t.Errorf("guest %s has pull secrets %v, want none", guest, refs)
		case secret != "" && (len(refs) != 1 || refs[0].Name != secret):
			t.Errorf("guest %s has pull secrets %v, want %s", guest, refs, secret)
		}
	}

	keys.set(registry, &authn.AuthConfig{Username: "robot", Password: "first"})
	priv := spec("a1a1000000000001", "priv")
	priv.Image = registry + "/team/app:1"
	create(d, priv)
	wantAuth(registry, "robot", "first")
	wantRefs("priv", name)
	pub := spec("a1a1000000000002", "pub")
	create(d, pub)
	wantRefs("pub", "")

	// A new password reaches the secret with the next Create.
	keys.set(registry, &authn.AuthConfig{Username: "robot", Password: "second"})
	create(d, priv)
	wantAuth(registry, "robot", "second")

	// Deleted by hand: written again.
	if err := secrets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	create(d, priv)
	wantAuth(registry, "robot", "second")

	// While the keychain cannot tell (no coordinator answers), the
	// secret stays and the guest keeps it.
	keys.mu.Lock()
	keys.unknown = true
	keys.mu.Unlock()
	priv.Env["MODE"] = "outage"
	create(d, priv)
	wantRefs("priv", name)
	wantAuth(registry, "robot", "second")
	keys.mu.Lock()
	keys.unknown = false
	keys.mu.Unlock()

	// Logged out: the guest references no secret, and the secret goes.
	keys.set(registry, nil)
	create(d, priv)
	wantRefs("priv", "")
	if _, err := secrets.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pull secret after the logout: %v, want not found", err)
	}

	// Logged out while the agent was down: the restarted driver finds
	// the secret an earlier run wrote, and removes it.
	keys.set(registry, &authn.AuthConfig{Username: "robot", Password: "third"})
	create(d, priv)
	wantRefs("priv", name)
	keys.set(registry, nil)
	create(newDriver(), priv)
	wantRefs("priv", "")
	if _, err := secrets.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pull secret after a logout while the agent was down: %v, want not found", err)
	}

	// Docker Hub's images, named short, have it under Docker Hub's key.
	keys.set("index.docker.io", &authn.AuthConfig{Username: "hub", Password: "pw"})
	hub := spec("a1a1000000000003", "hub")
	hub.Image = "nginx:1.25"
	create(d, hub)
	name = pullSecretName("index.docker.io")
	wantAuth("https://index.docker.io/v1/", "hub", "pw")
	wantRefs("hub", name)

	// A secret of that name that is not corpus's is left alone.
	foreign := spec("a1a1000000000004", "foreign")
	foreign.Image = "other.example/app:1"
	keys.set("other.example", &authn.AuthConfig{Username: "x", Password: "y"})
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: pullSecretName("other.example")},
		StringData: map[string]string{"mine": "yes"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := d.Create(ctx, foreign, nil); !errors.Is(err, drivers.ErrExists) {
		t.Errorf("Create over a foreign secret of the pull secret's name = %v, want ErrExists", err)
	}

	// By default a registry's answer is reused for a while: a restarted
	// agent's pass over many guests of one registry asks once.
	cached, err := New(Config{REST: c.Config, NamespacePrefix: "corpus-", Node: "pull-cached", Keychain: keys})
	if err != nil {
		t.Fatal(err)
	}
	defer cached.Close()
	keys.mu.Lock()
	before := keys.asked
	keys.mu.Unlock()
	for i, id := range []string{"b1b1000000000001", "b1b1000000000002", "b1b1000000000003"} {
		s := spec(id, fmt.Sprintf("many%d", i))
		s.Image = "other.example/app:1"
		create(cached, s)
	}
	keys.mu.Lock()
	asked := keys.asked - before
	keys.mu.Unlock()
	if asked != 1 {
		t.Errorf("three Creates of guests of one registry asked the keychain %d times, want once", asked)
	}

	// A keychain that fails (a coordinator refusing) fails the Create,
	// which writes no workload.
	keys.mu.Lock()
	keys.err = errors.New("refused")
	keys.mu.Unlock()
	broken := spec("a1a1000000000005", "broken")
	broken.Image = registry + "/team/app:2"
	if err := d.Create(ctx, broken, nil); err == nil {
		t.Error("Create with a failing keychain succeeded")
	}
	if _, err := c.Client.AppsV1().Deployments(d.Namespace()).Get(ctx, "broken", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the deployment of a guest whose credentials failed: %v, want not found", err)
	}
}
