package acme

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/acme"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/state"
	"corpus/internal/seal"
	corpusv1 "corpus/proto/corpus/v1"
)

// client is an ACME client for the configured account.
type client struct {
	*acme.Client
	challenges []string
}

// account returns a client for the cluster's ACME account, making its
// key and registering it with the CA the first time.
func (o *orderer) account(ctx context.Context) (*client, error) {
	cfg := o.Read().Acme()
	if cfg == nil {
		return nil, errors.New("no ACME account is configured (corpus ingress acme set)")
	}
	if o.client != nil && o.index == cfg.ModifyIndex {
		return o.client, nil
	}
	kr, err := o.Keyring(ctx)
	if err != nil {
		return nil, err
	}
	var key crypto.Signer
	if len(cfg.AccountKey) == 0 {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		key = k
	} else {
		if key, err = openKey(kr, cfg.AccountKey, state.AcmeKeyPlace); err != nil {
			return nil, fmt.Errorf("the ACME account key: %w", err)
		}
	}
	hc, err := httpClient(cfg.CaPem)
	if err != nil {
		return nil, err
	}
	c := &acme.Client{Key: key, DirectoryURL: cfg.DirectoryUrl, HTTPClient: hc, UserAgent: "corpus"}
	if cfg.AccountUrl != "" {
		c.KID = acme.KeyID(cfg.AccountUrl)
	} else {
		acct := &acme.Account{}
		if cfg.Email != "" {
			acct.Contact = []string{"mailto:" + cfg.Email}
		}
		got, err := c.Register(ctx, acct, acme.AcceptTOS)
		if errors.Is(err, acme.ErrAccountAlreadyExists) {
			got, err = c.GetReg(ctx, "")
		}
		if err != nil {
			return nil, fmt.Errorf("registering with %s: %w", cfg.DirectoryUrl, err)
		}
		sealed, err := sealKey(kr, key, state.AcmeKeyPlace)
		if err != nil {
			return nil, err
		}
		next := proto.Clone(cfg).(*corpusv1.AcmeConfig)
		next.AccountKey, next.AccountUrl = sealed, got.URI
		if _, err := o.Propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetAcmeConfig{SetAcmeConfig: &corpusv1.SetAcmeConfig{Config: next, ExpectModifyIndex: cfg.ModifyIndex}}}); err != nil {
			return nil, fmt.Errorf("keeping the ACME account: %w", err)
		}
		o.Logger.Info("acme account registered", "directory", cfg.DirectoryUrl, "account", got.URI)
		return o.account(ctx) // read back at its new index
	}
	challenges := cfg.Challenges
	if len(challenges) == 0 {
		challenges = []string{state.ChallengeHTTP01, state.ChallengeTLSALPN01}
	}
	o.client, o.index = &client{Client: c, challenges: challenges}, cfg.ModifyIndex
	return o.client, nil
}

// httpClient trusts the system's roots and caPEM's.
func httpClient(caPEM string) (*http.Client, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if caPEM != "" && !pool.AppendCertsFromPEM([]byte(caPEM)) {
		return nil, errors.New("the ACME CA certificates are not PEM certificates")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr, Timeout: time.Minute}, nil
}

// order gets domain a certificate: authorize (answering a challenge),
// finalize with a new key, keep the result.
func (o *orderer) order(ctx context.Context, c *client, domain string) error {
	o.Logger.Info("ordering a certificate", "domain", domain)
	ord, err := c.AuthorizeOrder(ctx, acme.DomainIDs(domain))
	if err != nil {
		return fmt.Errorf("new order: %w", err)
	}
	for _, u := range ord.AuthzURLs {
		if err := o.authorize(ctx, c, domain, u); err != nil {
			return err
		}
	}
	if ord, err = c.WaitOrder(ctx, ord.URI); err != nil {
		return fmt.Errorf("waiting for the order: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: domain}, DNSNames: []string{domain}}, key)
	if err != nil {
		return err
	}
	der, _, err := c.CreateCertFromOrder(ctx, ord, csr, true)
	if err != nil {
		return fmt.Errorf("finalizing the order: %w", err)
	}
	leaf, err := x509.ParseCertificate(der[0])
	if err != nil {
		return fmt.Errorf("the CA's certificate: %w", err)
	}
	if err := leaf.VerifyHostname(domain); err != nil {
		return fmt.Errorf("the CA's certificate: %w", err)
	}
	var chain strings.Builder
	for _, b := range der {
		pem.Encode(&chain, &pem.Block{Type: "CERTIFICATE", Bytes: b})
	}
	kr, err := o.Keyring(ctx)
	if err != nil {
		return err
	}
	sealed, err := sealKey(kr, key, state.CertificateKeyPlace(domain))
	if err != nil {
		return err
	}
	crt := &corpusv1.Certificate{
		Domain: domain, State: state.CertValid, ChainPem: chain.String(), Key: sealed,
		NotBefore: timestamppb.New(leaf.NotBefore), NotAfter: timestamppb.New(leaf.NotAfter),
		Serial: hex.EncodeToString(leaf.SerialNumber.Bytes()), Issuer: leaf.Issuer.CommonName,
		NextAttemptAt: timestamppb.New(RenewAt(leaf.NotBefore, leaf.NotAfter)),
		LastAttemptAt: timestamppb.New(o.Now()),
	}
	if len(der) > 1 {
		if resp, next, err := fetchOCSP(ctx, c.HTTPClient, leaf, der[1]); err == nil {
			crt.Ocsp, crt.OcspNextUpdate = resp, timestamppb.New(next)
		} else if !errors.Is(err, errNoOCSP) {
			o.Logger.Warn("fetching the OCSP response", "domain", domain, "error", err)
		}
	}
	err = o.update(ctx, domain, func(cur *corpusv1.Certificate) bool {
		crt.CreateIndex = cur.CreateIndex
		proto.Reset(cur) // the issued record replaces whatever was there
		proto.Merge(cur, crt)
		return true
	})
	if err != nil {
		return fmt.Errorf("keeping the certificate: %w", err)
	}
	o.Logger.Info("certificate issued", "domain", domain, "serial", crt.Serial, "not_after", leaf.NotAfter, "renew_at", crt.NextAttemptAt.AsTime())
	return nil
}

// authorize answers one authorization of domain with the first challenge
// type, in the configured order, that the CA offers.
func (o *orderer) authorize(ctx context.Context, c *client, domain, url string) error {
	z, err := c.GetAuthorization(ctx, url)
	if err != nil {
		return fmt.Errorf("authorization: %w", err)
	}
	if z.Status == acme.StatusValid {
		return nil
	}
	var chal *acme.Challenge
	for _, t := range c.challenges {
		if i := slices.IndexFunc(z.Challenges, func(ch *acme.Challenge) bool { return ch.Type == t }); i >= 0 {
			chal = z.Challenges[i]
			break
		}
	}
	if chal == nil {
		return fmt.Errorf("the CA offers no challenge corpus answers among %v for %s", c.challenges, domain)
	}
	ac, expect, err := o.challenge(ctx, c, domain, chal)
	if err != nil {
		return err
	}
	defer o.clearChallenge(context.WithoutCancel(ctx), domain, ac.Token)
	if err := o.waitAnswered(ctx, domain, ac, expect); err != nil {
		return err
	}
	if _, err := c.Accept(ctx, chal); err != nil {
		return fmt.Errorf("accepting the %s challenge: %w", chal.Type, err)
	}
	if _, err := c.WaitAuthorization(ctx, z.URI); err != nil {
		return fmt.Errorf("the CA's %s validation of %s: %w", chal.Type, domain, err)
	}
	return nil
}

// challenge writes the challenge into the domain's certificate record
// for the proxies, and says what a proxy answering it sends.
func (o *orderer) challenge(ctx context.Context, c *client, domain string, chal *acme.Challenge) (*corpusv1.AcmeChallenge, string, error) {
	ac := &corpusv1.AcmeChallenge{Type: chal.Type, Token: chal.Token}
	var expect string
	switch chal.Type {
	case state.ChallengeHTTP01:
		ka, err := c.HTTP01ChallengeResponse(chal.Token)
		if err != nil {
			return nil, "", err
		}
		ac.KeyAuthorization, expect = ka, ka
	case state.ChallengeTLSALPN01:
		cert, err := c.TLSALPN01ChallengeCert(chal.Token, domain)
		if err != nil {
			return nil, "", err
		}
		kr, err := o.Keyring(ctx)
		if err != nil {
			return nil, "", err
		}
		sealed, err := sealKey(kr, cert.PrivateKey.(crypto.Signer), state.ChallengeKeyPlace(domain))
		if err != nil {
			return nil, "", err
		}
		ac.AlpnCertPem = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}))
		ac.AlpnKey = sealed
		sum := sha256.Sum256(cert.Certificate[0])
		expect = hex.EncodeToString(sum[:])
	}
	err := o.update(ctx, domain, func(crt *corpusv1.Certificate) bool {
		crt.Challenge = ac
		crt.LastAttemptAt = timestamppb.New(o.Now())
		return true
	})
	if err != nil {
		return nil, "", fmt.Errorf("publishing the challenge: %w", err)
	}
	return ac, expect, nil
}

// clearChallenge removes the challenge once answered (or given up).
func (o *orderer) clearChallenge(ctx context.Context, domain, token string) {
	o.update(ctx, domain, func(crt *corpusv1.Certificate) bool {
		if crt.Challenge.GetToken() != token {
			return false
		}
		crt.Challenge = nil
		return true
	})
}

// waitAnswered waits until the proxy of the domain's node answers the
// challenge as the CA will see it.
func (o *orderer) waitAnswered(ctx context.Context, domain string, ac *corpusv1.AcmeChallenge, expect string) error {
	ctx, cancel := context.WithTimeout(ctx, challengeWait)
	defer cancel()
	detail := "no node serves it"
	for {
		if node := domainNode(o.Read(), domain); node != nil {
			res, err := o.Check(ctx, node, &corpusv1.CheckChallengeRequest{Domain: domain, Type: ac.Type, Token: ac.Token, Expect: expect})
			switch {
			case err != nil:
				detail = fmt.Sprintf("node %s: %v", node.Name, err)
			case res.Ready:
				return nil
			default:
				detail = fmt.Sprintf("node %s: %s", node.Name, res.Detail)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the proxy does not answer the %s challenge of %s: %s", ac.Type, domain, detail)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func cloneCert(c *corpusv1.Certificate) *corpusv1.Certificate {
	return proto.Clone(c).(*corpusv1.Certificate)
}

// sealKey seals a private key (PKCS#8) for place.
func sealKey(kr *seal.Keyring, key crypto.Signer, place string) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return kr.Seal(der, place)
}

// openKey opens a key sealed by sealKey.
func openKey(kr *seal.Keyring, sealed []byte, place string) (crypto.Signer, error) {
	der, err := kr.Open(sealed, place)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T is not a signing key", k)
	}
	return s, nil
}

// describe is an order's error as users read it: the CA's problem
// detail when it gave one.
func describe(err error) string {
	var ae *acme.Error
	if errors.As(err, &ae) {
		msg := ae.ProblemType
		if ae.Detail != "" {
			msg = ae.Detail + " (" + ae.ProblemType + ")"
		}
		return strings.TrimSpace(msg)
	}
	var oe *acme.OrderError
	if errors.As(err, &oe) {
		return fmt.Sprintf("the order became %s", oe.Status)
	}
	var we *acme.AuthorizationError
	if errors.As(err, &we) {
		return we.Error()
	}
	return err.Error()
}

// pemBlocks returns the DER bytes of every PEM block of b.
func pemBlocks(b []byte) [][]byte {
	var out [][]byte
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		out = append(out, blk.Bytes)
	}
}
