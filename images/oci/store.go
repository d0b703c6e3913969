package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"corpus/internal/imageref"
)

// Store is one node's cache of OCI image layers. Its methods are safe for
// concurrent use; two pulls of one layer download it twice and the second
// rename wins, with the same verified bytes.
type Store struct {
	// Root is the cache's folder, made when missing.
	Root string
	// Insecure lists the registries (host or host:port, as in
	// references) that may be reached over plain HTTP. Registries on a
	// loopback address always may.
	Insecure []string
	// Transport is the HTTP transport under the registry client; nil is
	// http.DefaultTransport (system CAs).
	Transport http.RoundTripper
	// CertsDir holds the certificates of registries with an authority
	// of their own, as Docker's certs.d does (DefaultCertsDir):
	// CertsDir/HOST[:PORT]/*.crt are trusted for that registry beside the
	// system's CAs, and NAME.cert with NAME.key is a client certificate
	// offered to it. "", or a registry without a folder there, trusts
	// the system's CAs alone.
	CertsDir string
	// Log receives what unpacking skips (device nodes); nil discards.
	Log *slog.Logger
	// Keychain gives the credentials of a registry (its
	// authn.Resource's RegistryStr) for a pull, resolved once per pull
	// and kept nowhere; nil, or a registry it has none for
	// (authn.Anonymous), pulls anonymously.
	Keychain authn.Keychain
}

// Image is a pulled image: what a guest needs to run it.
type Image struct {
	// Reference is the reference it was pulled by.
	Reference string `json:"reference"`
	// Digest is the manifest's digest ("sha256:..."), what a guest or a
	// release records.
	Digest string `json:"digest"`
	// Config is the image's run configuration: entrypoint, cmd, env,
	// working dir, user, exposed ports, stop signal.
	Config v1.Config `json:"config"`
	// Layers are the layers' digests, lowest first, and DiffIDs the
	// digests of their uncompressed tars, from the image's config.
	Layers  []v1.Hash `json:"layers"`
	DiffIDs []v1.Hash `json:"diff_ids"`
	// Size is the layers' compressed size in bytes.
	Size int64 `json:"size"`
}

// ProgressFunc receives one line about a pull in progress.
type ProgressFunc func(msg string)

func (s *Store) blobPath(h v1.Hash) string {
	return filepath.Join(s.Root, "blobs", h.Algorithm, h.Hex)
}

// insecure reports whether registry may be reached over plain HTTP.
func (s *Store) insecure(registry string) bool {
	return imageref.Loopback(registry) || slices.Contains(s.Insecure, registry)
}

// Pull resolves image (a reference, imageref.Parse) to its manifest for
// this host's platform and fetches the layers the store lacks, each
// verified against its digest. progress, when not nil, hears about each
// layer fetched.
func (s *Store) Pull(ctx context.Context, image string, progress ProgressFunc) (*Image, error) {
	ref, err := imageref.Parse(image, false)
	if err != nil {
		return nil, err
	}
	registry := ref.Context().RegistryStr()
	if s.insecure(registry) {
		if ref, err = imageref.Parse(image, true); err != nil {
			return nil, err
		}
	}
	base := s.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	if base, err = registryTransport(base, s.CertsDir, registry); err != nil {
		return nil, fmt.Errorf("pulling %s: %w", image, err)
	}
	auth := authn.Anonymous
	if s.Keychain != nil {
		if auth, err = authn.Resolve(ctx, s.Keychain, ref.Context()); err != nil {
			return nil, fmt.Errorf("pulling %s: getting the credentials of registry %s: %w", image, registry, err)
		}
	}
	img, err := s.pull(ctx, ref, auth, schemeGuard{base: base, plainOK: s.insecure})
	if err != nil {
		return nil, fmt.Errorf("pulling %s: %w", image, s.untrusted(refused(err, ref, auth), registry))
	}
	out := &Image{Reference: image, Digest: img.digest.String(), Config: img.cfg.Config, DiffIDs: img.cfg.RootFS.DiffIDs}
	for i, l := range img.layers {
		h, err := l.Digest()
		if err != nil {
			return nil, fmt.Errorf("pulling %s: layer %d: %w", image, i+1, err)
		}
		n, err := s.fetchBlob(l, h)
		if err != nil {
			return nil, fmt.Errorf("pulling %s: layer %d/%d %s: %w", image, i+1, len(img.layers), h, s.untrusted(refused(err, ref, auth), registry))
		}
		out.Layers = append(out.Layers, h)
		out.Size += n
		if progress != nil {
			progress(fmt.Sprintf("pulled layer %d/%d of %s (%d bytes)", i+1, len(img.layers), image, n))
		}
	}
	return out, nil
}

// remoteImage is an image's manifest digest, config and layers as a
// registry gave them.
type remoteImage struct {
	digest v1.Hash
	cfg    *v1.ConfigFile
	layers []v1.Layer
}

// pull reads ref's manifest for this host's platform and its config.
func (s *Store) pull(ctx context.Context, ref name.Reference, auth authn.Authenticator, rt http.RoundTripper) (*remoteImage, error) {
	img, err := remote.Image(ref,
		remote.WithContext(ctx),
		remote.WithAuth(auth),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}),
		remote.WithTransport(rt))
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading its config: %w", err)
	}
	if cfg.OS != "" && cfg.OS != "linux" {
		return nil, fmt.Errorf("image is for %s, not linux", cfg.OS)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	if len(layers) != len(cfg.RootFS.DiffIDs) {
		return nil, fmt.Errorf("%d layers but %d diff_ids in its config", len(layers), len(cfg.RootFS.DiffIDs))
	}
	return &remoteImage{digest: digest, cfg: cfg, layers: layers}, nil
}

// refused says what a registry's refusal to serve ref (401 or 403) means:
// credentials it did not take, or none where it wants some. Other errors
// are err.
func refused(err error, ref name.Reference, auth authn.Authenticator) error {
	var te *transport.Error
	if !errors.As(err, &te) || (te.StatusCode != http.StatusUnauthorized && te.StatusCode != http.StatusForbidden) {
		return err
	}
	reg, repo := ref.Context().RegistryStr(), ref.Context().RepositoryStr()
	if auth == authn.Anonymous {
		return &refusedError{fmt.Sprintf("registry %s wants credentials for %s (corpus registry login %s)", reg, repo, reg)}
	}
	return &refusedError{fmt.Sprintf("registry %s refused the credentials for %s (corpus registry login %s sets them again)", reg, repo, reg)}
}

// refusedError is a registry's refusal; it is ErrUnauthorized.
type refusedError struct{ msg string }

func (e *refusedError) Error() string        { return e.msg }
func (e *refusedError) Is(target error) bool { return target == ErrUnauthorized }

// fetchBlob stores layer l's compressed bytes under its digest h unless
// the store has them, and returns their size. The bytes are hashed as
// they are written and renamed into place only when they match h.
func (s *Store) fetchBlob(l v1.Layer, h v1.Hash) (int64, error) {
	if h.Algorithm != "sha256" {
		return 0, fmt.Errorf("digest algorithm %q is not supported (want sha256)", h.Algorithm)
	}
	dst := s.blobPath(h)
	if st, err := os.Stat(dst); err == nil {
		return st.Size(), nil
	}
	tmpDir := filepath.Join(s.Root, "tmp")
	for _, d := range []string{filepath.Dir(dst), tmpDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return 0, err
		}
	}
	rc, err := l.Compressed()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	f, err := os.CreateTemp(tmpDir, h.Hex+".*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, sum), rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != h.Hex {
		return 0, fmt.Errorf("%w: layer bytes have sha256:%s", ErrDigestMismatch, got)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return 0, err
	}
	return n, nil
}

// Unpack makes dir img's root file system from the store's copies of its
// layers (Pull fetched them), unless dir exists: a dir that exists is
// complete. The layers are applied in order into dir+".partial" (an
// earlier attempt's leftover is removed first), each checked against
// its diff_id, and the folder renamed to dir at the end. dir's parent
// should be reachable by root alone: the tree keeps the image's owners
// and set-id bits with the host's ids.
func (s *Store) Unpack(ctx context.Context, img *Image, dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	tmp := dir + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("removing an interrupted unpack: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return err
	}
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for i, h := range img.Layers {
		if err := ctx.Err(); err != nil {
			os.RemoveAll(tmp)
			return err
		}
		if err := applyBlob(tmp, s.blobPath(h), img.DiffIDs[i], log.With("image", img.Reference, "layer", h.String())); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("unpacking %s: layer %d/%d %s: %w", img.Reference, i+1, len(img.Layers), h, err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return nil
}

// Sweep removes what interrupted pulls left in the store: layers partly
// downloaded when the process was killed. Call it while no pull runs,
// when the store's owner starts.
func (s *Store) Sweep() error {
	if err := os.RemoveAll(filepath.Join(s.Root, "tmp")); err != nil {
		return fmt.Errorf("sweeping the image store: %w", err)
	}
	return nil
}

// schemeGuard refuses plain HTTP requests to registries that may not
// be reached so: the registry client falls back to HTTP by itself for
// private addresses, which would let a network attacker downgrade.
type schemeGuard struct {
	base    http.RoundTripper
	plainOK func(host string) bool
}

func (g schemeGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.EqualFold(req.URL.Scheme, "http") && !g.plainOK(req.URL.Host) {
		return nil, fmt.Errorf("%w: %s (mark it insecure on the agent to allow it)", ErrPlainHTTP, req.URL.Host)
	}
	return g.base.RoundTrip(req)
}
