package routes

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/api"
	"corpus/coordinator/state"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// validTLS checks a route's TLS settings.
func validTLS(kind corpusv1.RouteKind, https, redirect, hsts bool) error {
	if (https || redirect || hsts) && kind != corpusv1.RouteHTTP {
		return api.Invalidf("only http routes serve HTTPS")
	}
	if (redirect || hsts) && !https {
		return api.Invalidf("a redirect to HTTPS and HSTS need --https")
	}
	return nil
}

func (s *ingressService) SetRouteTls(ctx context.Context, req *connect.Request[corpusv1.SetRouteTlsRequest]) (*connect.Response[corpusv1.SetRouteTlsResponse], error) {
	m := req.Msg
	if err := validTLS(corpusv1.RouteHTTP, m.Https, m.RedirectHttps, m.Hsts); err != nil {
		return nil, api.ToConnect(err)
	}
	r, err := findRoute(s.b.Store.Read(), m.Domain, 0, "")
	if err != nil {
		return nil, api.ToConnect(err)
	}
	if !r.Is(corpusv1.RouteHTTP) {
		return nil, api.ToConnect(api.Invalidf("route %s is a %s route; only http routes serve HTTPS", r.Domain, r.Kind))
	}
	res, err := s.setTLS(ctx, r, m.Https, m.RedirectHttps, m.Hsts)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

// setTLS writes a route's TLS settings when they differ.
func (s *ingressService) setTLS(ctx context.Context, r *corpusv1.Route, https, redirect, hsts bool) (*corpusv1.SetRouteTlsResponse, error) {
	if r.Https == https && r.RedirectHttps == redirect && r.Hsts == hsts {
		return &corpusv1.SetRouteTlsResponse{Route: r}, nil
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetRouteTls{SetRouteTls: &corpusv1.SetRouteTls{
		Id: r.Id, Https: https, RedirectHttps: redirect, Hsts: hsts}}}); err != nil {
		return nil, err
	}
	return &corpusv1.SetRouteTlsResponse{Route: s.b.Store.Read().Route(r.Id), Changed: true}, nil
}

func (s *ingressService) SetAcme(ctx context.Context, req *connect.Request[corpusv1.SetAcmeRequest]) (*connect.Response[corpusv1.SetAcmeResponse], error) {
	m := req.Msg
	view := s.b.Store.Read()
	cur := view.Acme()
	if m.DirectoryUrl == "" {
		if cur == nil {
			return connect.NewResponse(&corpusv1.SetAcmeResponse{}), nil
		}
		if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetAcmeConfig{SetAcmeConfig: &corpusv1.SetAcmeConfig{Config: &corpusv1.AcmeConfig{}}}}); err != nil {
			return nil, err
		}
		return connect.NewResponse(&corpusv1.SetAcmeResponse{Changed: true}), nil
	}
	u, err := url.Parse(m.DirectoryUrl)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, api.ToConnect(api.Invalidf("directory %q is not an http(s) URL", m.DirectoryUrl))
	}
	if m.Email != "" && (!strings.Contains(m.Email, "@") || strings.ContainsAny(m.Email, " \t\r\n<>")) {
		return nil, api.ToConnect(api.Invalidf("email %q is not an address", m.Email))
	}
	if m.CaPem != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(m.CaPem)) {
			return nil, api.ToConnect(api.Invalidf("the CA file holds no PEM certificate"))
		}
	}
	challenges := slices.Clone(m.Challenges)
	if len(challenges) == 0 {
		challenges = []string{state.ChallengeHTTP01, state.ChallengeTLSALPN01}
	}
	for _, c := range challenges {
		if !state.ValidChallenge(c) {
			return nil, api.ToConnect(api.Invalidf("challenge %q: use http-01 or tls-alpn-01", c))
		}
	}
	next := &corpusv1.AcmeConfig{DirectoryUrl: m.DirectoryUrl, Email: m.Email, CaPem: m.CaPem, Challenges: challenges}
	var expect uint64
	if cur != nil {
		expect = cur.ModifyIndex
		if cur.DirectoryUrl == next.DirectoryUrl && cur.Email == next.Email && cur.CaPem == next.CaPem && slices.Equal(cur.Challenges, next.Challenges) {
			return connect.NewResponse(&corpusv1.SetAcmeResponse{Acme: acmeView(cur)}), nil
		}
		if cur.DirectoryUrl == next.DirectoryUrl && cur.Email == next.Email {
			// Same CA and contact: the account stays.
			next.AccountKey, next.AccountUrl = cur.AccountKey, cur.AccountUrl
		}
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetAcmeConfig{SetAcmeConfig: &corpusv1.SetAcmeConfig{Config: next, ExpectModifyIndex: expect}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.SetAcmeResponse{Acme: acmeView(s.b.Store.Read().Acme()), Changed: true}), nil
}

func (s *ingressService) GetAcme(ctx context.Context, _ *connect.Request[corpusv1.GetAcmeRequest]) (*connect.Response[corpusv1.GetAcmeResponse], error) {
	return connect.NewResponse(&corpusv1.GetAcmeResponse{Acme: acmeView(s.b.Store.Read().Acme())}), nil
}

func (s *ingressService) RenewCertificate(ctx context.Context, req *connect.Request[corpusv1.RenewDomainCertificateRequest]) (*connect.Response[corpusv1.RenewDomainCertificateResponse], error) {
	d, err := names.ParseDomain(req.Msg.Domain)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	domain := string(d)
	view := s.b.Store.Read()
	if view.Acme() == nil {
		return nil, api.ToConnect(fmt.Errorf("no ACME account is configured; set one with corpus ingress acme set: %w", state.ErrBadTransition))
	}
	if !slices.Contains(view.HTTPSDomains(), domain) {
		return nil, api.ToConnect(api.NotFound("https route for domain", domain, "corpus ingress list"))
	}
	for range 3 {
		cur := s.b.Store.Read().Certificate(domain)
		crt := &corpusv1.Certificate{Domain: domain, State: state.CertPending}
		var expect uint64
		if cur != nil {
			crt, expect = proto.Clone(cur).(*corpusv1.Certificate), cur.ModifyIndex
		}
		crt.NextAttemptAt = timestamppb.Now()
		_, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_PutCertificate{PutCertificate: &corpusv1.PutCertificate{Certificate: crt, ExpectModifyIndex: expect}}})
		if err == nil {
			return connect.NewResponse(&corpusv1.RenewDomainCertificateResponse{Certificate: certificateView(s.b.Store.Read().Certificate(domain))}), nil
		}
		if connect.CodeOf(err) != connect.CodeAborted {
			return nil, err
		}
	}
	return nil, connect.NewError(connect.CodeAborted, errors.New("the certificate kept changing; try again"))
}

func acmeView(c *corpusv1.AcmeConfig) *corpusv1.AcmeView {
	if c == nil {
		return nil
	}
	return &corpusv1.AcmeView{DirectoryUrl: c.DirectoryUrl, Email: c.Email, HasCa: c.CaPem != "", Challenges: c.Challenges, AccountUrl: c.AccountUrl}
}

func certificateView(c *corpusv1.Certificate) *corpusv1.CertificateView {
	if c == nil {
		return nil
	}
	return &corpusv1.CertificateView{Domain: c.Domain, State: c.State, NotBefore: c.NotBefore, NotAfter: c.NotAfter, Serial: c.Serial, Issuer: c.Issuer,
		LastError: c.LastError, NextAttemptAt: c.NextAttemptAt, Failures: c.Failures, OcspStapled: len(c.Ocsp) > 0, Challenge: c.Challenge.GetType()}
}
