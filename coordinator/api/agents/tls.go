package agents

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"

	"connectrpc.com/connect"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	"corpus/coordinator/state"
	"corpus/internal/seal"
	corpusv1 "corpus/proto/corpus/v1"
)

// TlsMaterial gives an agent the certificates of the https domains routed
// to its guests, keys opened.
func (s *Service) TlsMaterial(ctx context.Context, req *connect.Request[corpusv1.TlsMaterialRequest]) (*connect.Response[corpusv1.TlsMaterialResponse], error) {
	p := auth.FromContext(ctx)
	view := s.b.Store.Read()
	if len(req.Msg.Domains) > 10000 {
		return nil, api.ToConnect(api.Invalidf("%d domains in one call", len(req.Msg.Domains)))
	}
	var k *seal.Keyring
	res := &corpusv1.TlsMaterialResponse{}
	for _, domain := range req.Msg.Domains {
		r := view.RouteByDomain(domain)
		if r == nil || !r.Https {
			return nil, api.ToConnect(api.NotFound("https route for domain", domain, "corpus ingress list"))
		}
		if !slices.ContainsFunc(view.RoutesOnNode(p.NodeID), func(r *corpusv1.Route) bool { return r.Domain == domain }) {
			return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("domain %s is not routed to a guest of node %s", domain, p.NodeName))
		}
		c := view.Certificate(domain)
		if c == nil {
			continue
		}
		if k == nil {
			var err error
			if k, err = s.b.Keyring().Open(view); err != nil {
				return nil, api.ToConnect(err)
			}
		}
		td, err := tlsDomain(k, c)
		if err != nil {
			s.b.Logger.Warn("a certificate's key does not open; it will be ordered again", "domain", domain, "error", err)
			continue
		}
		res.Domains = append(res.Domains, td)
	}
	return connect.NewResponse(res), nil
}

// tlsDomain opens a certificate's keys for a proxy.
func tlsDomain(k *seal.Keyring, c *corpusv1.Certificate) (*corpusv1.TlsDomain, error) {
	td := &corpusv1.TlsDomain{Domain: c.Domain, ModifyIndex: c.ModifyIndex}
	if c.ChainPem != "" && len(c.Key) > 0 {
		key, err := openPEMKey(k, c.Key, state.CertificateKeyPlace(c.Domain))
		if err != nil {
			return nil, err
		}
		td.ChainPem, td.KeyPem, td.Ocsp = c.ChainPem, key, c.Ocsp
	}
	if ch := c.Challenge; ch != nil && ch.Type == state.ChallengeTLSALPN01 {
		key, err := openPEMKey(k, ch.AlpnKey, state.ChallengeKeyPlace(c.Domain))
		if err != nil {
			return nil, err
		}
		td.AlpnCertPem, td.AlpnKeyPem = ch.AlpnCertPem, key
	}
	return td, nil
}

func openPEMKey(k *seal.Keyring, sealed []byte, place string) (string, error) {
	if k == nil {
		return "", errors.New("no keyring")
	}
	der, err := k.Open(sealed, place)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
}

// nodeCertificates are the certificates of the https domains routed to
// a node's guests, for its watch.
func nodeCertificates(view *state.Snap, routes []*corpusv1.Route) []*corpusv1.Certificate {
	var out []*corpusv1.Certificate
	for _, r := range routes {
		if !r.Https {
			continue
		}
		if c := view.Certificate(r.Domain); c != nil {
			out = append(out, c)
		}
	}
	return out
}
