package kubernetes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"corpus/drivers"
	"corpus/internal/imageref"
)

// Registry credentials reach the kubelet, which pulls the guests'
// images, as image pull secrets: one Secret of type
// kubernetes.io/dockerconfigjson per registry with a login in corpus
// (corpus registry login), in the driver's namespace, named from the
// registry, and referenced by the pod template of every guest whose
// image is in that registry. Its content comes from the agent's
// keychain at each Create (the agent's reconcile of a guest: at least
// every pass), its answer reused for Config.CredentialsTTL, so a new
// password reaches the cluster within that long (and a secret deleted
// or edited by hand is written again); a guest whose registry lost its
// login references no secret any more, and the secret goes. While no
// coordinator answers, a registry's secret stays as it was. The
// password is in the Secret as the kubelet needs it: the cluster's own
// protection of Secrets (encryption at rest, RBAC) keeps it.
const (
	// LabelPullSecret marks corpus's pull secrets.
	LabelPullSecret = "corpus.dev/pull-secret"
	// AnnotRegistry names a pull secret's registry.
	AnnotRegistry = "corpus.dev/registry"
)

// pullSecretName is the name of registry's pull secret: registries hold
// ':' and may be longer than a name may.
func pullSecretName(registry string) string {
	sum := sha256.Sum256([]byte(registry))
	return "corpus-registry-" + hex.EncodeToString(sum[:8])
}

// dockerConfigKey is registry as a docker config names it: Docker Hub
// by its historical URL, which every kubelet matches.
func dockerConfigKey(registry string) string {
	if registry == imageref.DockerHub {
		return "https://index.docker.io/v1/"
	}
	return registry
}

// pullSecret is the registry's pull secret holding auth.
func pullSecret(ns, registry string, auth *authn.AuthConfig) (*corev1.Secret, error) {
	// AuthConfig marshals as a docker config entry: username,
	// password, and auth computed from them.
	data, err := json.Marshal(map[string]any{"auths": map[string]authn.AuthConfig{dockerConfigKey(registry): *auth}})
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: pullSecretName(registry), Namespace: ns,
			Labels:      map[string]string{LabelManagedBy: managedBy, LabelPullSecret: "true"},
			Annotations: map[string]string{AnnotRegistry: registry},
		},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: data},
	}, nil
}

// knowingKeychain is a keychain that tells "no credentials" from
// "cannot tell now" (the agent's, while no coordinator answers):
// registryauth.Keychain.
type knowingKeychain interface {
	ResolveKnown(context.Context, authn.Resource) (authn.Authenticator, bool, error)
}

// credentials is the keychain's answer for a registry, and when it came.
type credentials struct {
	auth *authn.AuthConfig
	at   time.Time
}

// credentials asks the keychain for the credentials of image's
// registry (or reuses its answer of less than CredentialsTTL ago): the
// registry, and nil when it has none (or the driver has no keychain).
// known is false when the keychain cannot tell now.
func (d *Driver) credentials(ctx context.Context, image string) (registry string, auth *authn.AuthConfig, known bool, err error) {
	ref, err := imageref.ParseAny(image)
	if err != nil || d.cfg.Keychain == nil {
		return "", nil, true, nil // validate refused a bad reference already
	}
	res := ref.Context()
	registry = res.RegistryStr()
	d.credMu.Lock()
	c, ok := d.creds[registry]
	d.credMu.Unlock()
	if ok && time.Since(c.at) < d.cfg.CredentialsTTL {
		return registry, c.auth, true, nil
	}
	auth, known, err = d.askKeychain(ctx, res)
	if known && err == nil && d.cfg.CredentialsTTL > 0 {
		d.credMu.Lock()
		if d.creds == nil {
			d.creds = map[string]credentials{}
		}
		d.creds[registry] = credentials{auth: auth, at: time.Now()}
		d.credMu.Unlock()
	}
	if err != nil {
		return "", nil, true, err
	}
	return registry, auth, known, nil
}

// askKeychain is credentials without the reuse.
func (d *Driver) askKeychain(ctx context.Context, res name.Repository) (auth *authn.AuthConfig, known bool, err error) {
	registry := res.RegistryStr()
	var a authn.Authenticator
	if k, ok := d.cfg.Keychain.(knowingKeychain); ok {
		if a, known, err = k.ResolveKnown(ctx, res); !known {
			return nil, false, nil
		}
	} else {
		a, err = authn.Resolve(ctx, d.cfg.Keychain, res)
	}
	if err != nil {
		return nil, true, fmt.Errorf("getting the credentials of registry %s: %w", registry, err)
	}
	if a == authn.Anonymous {
		return nil, true, nil
	}
	if auth, err = authn.Authorization(ctx, a); err != nil {
		return nil, true, fmt.Errorf("getting the credentials of registry %s: %w", registry, err)
	}
	if *auth == (authn.AuthConfig{}) {
		return nil, true, nil
	}
	return auth, true, nil
}

// convergePullSecret makes the pull secret of image's registry hold its
// credentials, and returns its name; with no credentials it returns ""
// and removes a pull secret the registry had.
func (d *Driver) convergePullSecret(ctx context.Context, image string, progress drivers.ProgressFunc) (string, error) {
	registry, auth, known, err := d.credentials(ctx, image)
	if err != nil || registry == "" {
		return "", err
	}
	d.pullMu.Lock()
	defer d.pullMu.Unlock()
	if err := d.loadPullSecrets(ctx); err != nil {
		return "", err
	}
	api := d.client.CoreV1().Secrets(d.ns)
	secretName := pullSecretName(registry)
	if !known {
		// No coordinator to ask: what the registry had stays.
		if d.pulls[registry] {
			return secretName, nil
		}
		return "", nil
	}
	if auth == nil {
		if !d.pulls[registry] {
			return "", nil
		}
		if err := api.Delete(ctx, secretName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("removing the pull secret of registry %s: %w", registry, err)
		}
		delete(d.pulls, registry)
		d.logger.Info("pull secret removed: the registry has no login", "registry", registry, "namespace", d.ns)
		return "", nil
	}
	want, err := pullSecret(d.ns, registry, auth)
	if err != nil {
		return "", err
	}
	// Read each time: a secret deleted or edited by hand is written
	// again, as the other objects are.
	cur, err := api.Get(ctx, secretName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if progress != nil {
			progress("creating the pull secret of registry " + registry)
		}
		if _, err := api.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return "", d.writeErr("creating pull secret", secretName, err)
		}
	case err != nil:
		return "", fmt.Errorf("reading pull secret %s: %w", secretName, err)
	case cur.Labels[LabelManagedBy] != managedBy || cur.Labels[LabelPullSecret] != "true":
		return "", fmt.Errorf("secret %s/%s is not corpus's pull secret of registry %s: %w", d.ns, secretName, registry, drivers.ErrExists)
	case bytes.Equal(cur.Data[corev1.DockerConfigJsonKey], want.Data[corev1.DockerConfigJsonKey]) && len(cur.Data) == 1:
		d.pulls[registry] = true
		return secretName, nil
	default:
		if progress != nil {
			progress("updating the pull secret of registry " + registry)
		}
		next := cur.DeepCopy()
		next.Labels = merged(cur.Labels, want.Labels)
		next.Annotations = merged(cur.Annotations, want.Annotations)
		next.Data = want.Data // a secret's type cannot change; corpus's is this one
		if _, err := api.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
			return "", d.writeErr("updating pull secret", secretName, err)
		}
	}
	d.pulls[registry] = true
	d.logger.Info("pull secret written", "registry", registry, "namespace", d.ns, "secret", secretName)
	return secretName, nil
}

// loadPullSecrets learns, once, which pull secrets the namespace holds
// (those an earlier run of the agent wrote): by their annotations, not
// their content. Called with pullMu held.
func (d *Driver) loadPullSecrets(ctx context.Context) error {
	if d.pulls != nil {
		return nil
	}
	list, err := d.client.CoreV1().Secrets(d.ns).List(ctx, metav1.ListOptions{LabelSelector: LabelPullSecret + "=true," + managedSelector})
	if err != nil {
		return fmt.Errorf("listing pull secrets: %w", err)
	}
	d.pulls = map[string]bool{}
	for _, s := range list.Items {
		if r := s.Annotations[AnnotRegistry]; r != "" {
			d.pulls[r] = true
		}
	}
	return nil
}
