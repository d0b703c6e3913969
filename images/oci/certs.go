package oci

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// DefaultCertsDir is where a node keeps the certificates of registries
// with an authority of their own (Store.CertsDir), as Docker keeps them
// in /etc/docker/certs.d.
const DefaultCertsDir = "/etc/corpus/certs.d"

// registryTransport is base for a pull from registry, trusting beside
// the system's CAs the authorities in dir/registry/*.crt and offering
// the client certificate dir/registry/NAME.cert with NAME.key, when that
// folder exists. base is returned as it is without one (or when it is
// not an *http.Transport: a test's).
func registryTransport(base http.RoundTripper, dir, registry string) (http.RoundTripper, error) {
	t, ok := base.(*http.Transport)
	if dir == "" || !ok {
		return base, nil
	}
	folder := filepath.Join(dir, registry)
	entries, err := os.ReadDir(folder)
	if errors.Is(err, os.ErrNotExist) {
		return base, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading registry %s's certificates: %w", registry, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.TLSClientConfig != nil {
		cfg = t.TLSClientConfig.Clone()
	}
	for _, e := range entries {
		path := filepath.Join(folder, e.Name())
		switch {
		case strings.HasSuffix(e.Name(), ".crt"):
			pem, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("registry %s's certificates: %w", registry, err)
			}
			if cfg.RootCAs == nil {
				if cfg.RootCAs, err = x509.SystemCertPool(); err != nil {
					cfg.RootCAs = x509.NewCertPool()
				}
			}
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("registry %s's certificates: %s holds no PEM certificate", registry, path)
			}
		case strings.HasSuffix(e.Name(), ".cert"):
			key := strings.TrimSuffix(path, ".cert") + ".key"
			pair, err := tls.LoadX509KeyPair(path, key)
			if err != nil {
				return nil, fmt.Errorf("registry %s's client certificate %s (with its key %s): %w", registry, path, key, err)
			}
			cfg.Certificates = append(cfg.Certificates, pair)
		}
	}
	t = t.Clone()
	t.TLSClientConfig = cfg
	return t, nil
}

// untrusted says, for a pull that failed on registry's certificate,
// where the node takes the registry's authority from.
func (s *Store) untrusted(err error, registry string) error {
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		return err
	}
	where := "in a folder named after it in the agent's registry certificates folder"
	if s.CertsDir != "" {
		where = "in " + filepath.Join(s.CertsDir, registry, "ca.crt")
	}
	return fmt.Errorf("registry %s's certificate is signed by an authority this node does not trust (put that authority's certificate %s): %w", registry, where, err)
}
