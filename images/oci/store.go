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
	"syscall"
	"time"

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
	ranged := &rangedBlobs{ctx: ctx, repo: ref.Context(), auth: auth, rt: schemeGuard{base: base, plainOK: s.insecure}, insecure: s.insecure(registry)}
	for i, l := range img.layers {
		h, err := l.Digest()
		if err != nil {
			return nil, fmt.Errorf("pulling %s: layer %d: %w", image, i+1, err)
		}
		label := fmt.Sprintf("layer %d/%d of %s", i+1, len(img.layers), image)
		n, err := s.fetchBlob(l, h, ranged, label, progress)
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
// the store has them, and returns their size. The bytes go to
// tmp/HEX.partial as they come, hashed, and are renamed into place only
// when they match h. A download cut short (a lost connection, the
// process killed) leaves the partial file: the next one asks the
// registry for the rest alone (an HTTP range), and starts over when the
// registry does not serve ranges. progress hears how far a long one got.
func (s *Store) fetchBlob(l v1.Layer, h v1.Hash, ranged *rangedBlobs, label string, progress ProgressFunc) (int64, error) {
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
	size, err := l.Size()
	if err != nil {
		return 0, err
	}
	partial := filepath.Join(tmpDir, h.Hex+".partial")
	f, err := lockPartial(partial)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if st, err := os.Stat(dst); err == nil {
		os.Remove(partial) // another pull fetched it meanwhile
		return st.Size(), nil
	}
	sum := sha256.New()
	have, err := io.Copy(sum, f)
	if err != nil {
		return 0, err
	}
	var rc io.ReadCloser
	if have > 0 && have < size {
		if rc = ranged.rest(h, have, size); rc != nil && progress != nil {
			progress(fmt.Sprintf("resuming %s at %s of %s", label, mb(have), mb(size)))
		}
	}
	if rc == nil {
		// From the start: what the file held is not a prefix the
		// registry continues.
		if err := f.Truncate(0); err != nil {
			return 0, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
		sum.Reset()
		have = 0
		if rc, err = l.Compressed(); err != nil {
			return 0, err
		}
	}
	defer rc.Close()
	w := &progressWriter{done: have, size: size, label: label, progress: progress, last: time.Now()}
	n, err := io.Copy(io.MultiWriter(f, sum, w), rc)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return 0, err
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != h.Hex {
		os.Remove(partial)
		return 0, fmt.Errorf("%w: layer bytes have sha256:%s", ErrDigestMismatch, got)
	}
	if err := os.Rename(partial, dst); err != nil {
		return 0, err
	}
	return have + n, nil
}

// lockPartial opens (or makes) a partial download and locks it: a second
// pull of the same layer waits for the first, then finds it stored (or
// goes on from where the first stopped).
func lockPartial(path string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
		// The holder before may have renamed or removed the file: then
		// this one is not the path's any more.
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return f, nil
		}
		f.Close()
		if err2 != nil && !errors.Is(err2, fs.ErrNotExist) {
			return nil, err2
		}
	}
}

// progressEvery is how often a download says how far it got.
const progressEvery = 2 * time.Second

// progressWriter tells progress, now and then, how much of a layer came.
type progressWriter struct {
	done, size int64
	label      string
	progress   ProgressFunc
	last       time.Time
}

func (w *progressWriter) Write(p []byte) (int, error) {
	w.done += int64(len(p))
	if w.progress != nil && time.Since(w.last) >= progressEvery {
		w.last = time.Now()
		w.progress(fmt.Sprintf("pulling %s: %s of %s", w.label, mb(w.done), mb(w.size)))
	}
	return len(p), nil
}

// mb is a byte count in MB, one decimal.
func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// rangedBlobs asks a registry for the rest of a blob.
type rangedBlobs struct {
	ctx      context.Context
	repo     name.Repository
	auth     authn.Authenticator
	rt       http.RoundTripper
	insecure bool
}

// rest is the bytes of blob h from offset from (of size), or nil when
// the registry does not serve that range.
func (r *rangedBlobs) rest(h v1.Hash, from, size int64) io.ReadCloser {
	t, err := transport.NewWithContext(r.ctx, r.repo.Registry, r.auth, r.rt, []string{r.repo.Scope(transport.PullScope)})
	if err != nil {
		return nil
	}
	scheme := "https"
	if r.insecure {
		scheme = r.repo.Registry.Scheme()
	}
	u := fmt.Sprintf("%s://%s/v2/%s/blobs/%s", scheme, r.repo.RegistryStr(), r.repo.RepositoryStr(), h)
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", from, size-1))
	res, err := (&http.Client{Transport: t}).Do(req)
	if err != nil {
		return nil
	}
	var start int64 = -1
	if res.StatusCode == http.StatusPartialContent {
		fmt.Sscanf(res.Header.Get("Content-Range"), "bytes %d-", &start)
	}
	if start != from {
		res.Body.Close()
		return nil
	}
	return res.Body
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

// partialKeep is how long a layer partly downloaded is kept for a pull
// to go on with.
const partialKeep = 24 * time.Hour

// Sweep removes what interrupted pulls left in the store that no pull
// will go on with: files other than layers partly downloaded, and those
// older than a day. Call it while no pull runs, when the store's owner
// starts.
func (s *Store) Sweep() error {
	tmp := filepath.Join(s.Root, "tmp")
	entries, err := os.ReadDir(tmp)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweeping the image store: %w", err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err == nil && e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".partial") && time.Since(info.ModTime()) < partialKeep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(tmp, e.Name())); err != nil {
			return fmt.Errorf("sweeping the image store: %w", err)
		}
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
