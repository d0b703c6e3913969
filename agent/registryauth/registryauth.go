// Package registryauth is the node's keychain for OCI pulls: at each
// pull it asks a coordinator for the credentials of the image's registry
// (AgentService.RegistryCredentials, over the agent's mutual TLS) and
// hands them to the registry client for that pull alone. Nothing is
// cached or written on the node, so an agent that restarts asks again,
// and a logout or a new password takes effect at the next pull.
package registryauth

import (
	"context"
	"log/slog"
	"sync"

	"connectrpc.com/connect"
	"github.com/google/go-containerregistry/pkg/authn"
)

// Credentials are a registry's username and password as a coordinator
// gives them; found is false when the registry has none.
type Credentials struct {
	Found              bool
	Username, Password string
}

// Source asks a coordinator for registry host's credentials.
type Source func(ctx context.Context, host string) (Credentials, error)

// Keychain resolves registries' credentials from a Source. The zero
// Keychain (or one whose source is not set yet) pulls anonymously. Its
// methods are safe for concurrent use.
type Keychain struct {
	// Log hears of pulls that go anonymous because no coordinator
	// answered; nil discards.
	Log *slog.Logger

	mu  sync.Mutex
	src Source
}

var _ authn.ContextKeychain = (*Keychain)(nil)

// Use makes k ask src from now on.
func (k *Keychain) Use(src Source) {
	k.mu.Lock()
	k.src = src
	k.mu.Unlock()
}

// Resolve is ResolveContext without a deadline.
func (k *Keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	return k.ResolveContext(context.Background(), r)
}

// ResolveContext asks the source for r's registry. A registry without
// credentials is authn.Anonymous; so is any registry while no
// coordinator answers (a public image still pulls; a private one fails
// saying the registry wants credentials, and is tried again). A refusal
// (a node not running a guest of that registry) is an error.
func (k *Keychain) ResolveContext(ctx context.Context, r authn.Resource) (authn.Authenticator, error) {
	a, known, err := k.ResolveKnown(ctx, r)
	if known {
		return a, err
	}
	if k.Log != nil {
		k.Log.Warn("no coordinator answered for a registry's credentials; pulling anonymously", "registry", r.RegistryStr(), "error", err)
	}
	return authn.Anonymous, nil
}

// ResolveKnown is ResolveContext for a caller that tells "no
// credentials" from "cannot tell now": known is false (the
// authenticator nil, the error saying why, if anything) while no
// coordinator answers or before the agent has one to ask. The kubernetes
// driver keeps a registry's pull secret as it is then, rather than
// removing it as after a logout.
func (k *Keychain) ResolveKnown(ctx context.Context, r authn.Resource) (a authn.Authenticator, known bool, err error) {
	k.mu.Lock()
	src := k.src
	k.mu.Unlock()
	if src == nil {
		return nil, false, nil
	}
	c, err := src(ctx, r.RegistryStr())
	if connect.CodeOf(err) == connect.CodeUnavailable || connect.CodeOf(err) == connect.CodeDeadlineExceeded {
		return nil, false, err
	}
	if err != nil {
		return nil, true, err
	}
	if !c.Found {
		return authn.Anonymous, true, nil
	}
	return authn.FromConfig(authn.AuthConfig{Username: c.Username, Password: c.Password}), true, nil
}
