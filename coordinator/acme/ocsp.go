package acme

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"golang.org/x/crypto/ocsp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/state"
)

// OCSP stapling: when the CA names an OCSP responder in its certificates
// the orderer fetches the leaf's response with the certificate and again
// half-way to its next update; the proxies staple it. CAs that offer no
// OCSP (Let's Encrypt stopped in 2025) leave it empty.

// errNoOCSP: the certificate names no OCSP responder.
var errNoOCSP = errors.New("the certificate names no OCSP responder")

// fetchOCSP asks the leaf's OCSP responder about it; it returns the raw
// response and when it should be refreshed.
func fetchOCSP(ctx context.Context, hc *http.Client, leaf *x509.Certificate, issuerDER []byte) ([]byte, time.Time, error) {
	if len(leaf.OCSPServer) == 0 {
		return nil, time.Time{}, errNoOCSP
	}
	issuer, err := x509.ParseCertificate(issuerDER)
	if err != nil {
		return nil, time.Time{}, err
	}
	req, err := ocsp.CreateRequest(leaf, issuer, nil)
	if err != nil {
		return nil, time.Time{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, leaf.OCSPServer[0], bytes.NewReader(req))
	if err != nil {
		return nil, time.Time{}, err
	}
	hr.Header.Set("Content-Type", "application/ocsp-request")
	res, err := hc.Do(hr)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, time.Time{}, fmt.Errorf("OCSP responder %s: %s", leaf.OCSPServer[0], res.Status)
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if err != nil {
		return nil, time.Time{}, err
	}
	resp, err := ocsp.ParseResponseForCert(raw, leaf, issuer)
	if err != nil {
		return nil, time.Time{}, err
	}
	if resp.Status != ocsp.Good {
		return nil, time.Time{}, fmt.Errorf("OCSP responder says the certificate is not good (status %d)", resp.Status)
	}
	next := resp.NextUpdate
	if next.IsZero() {
		next = time.Now().Add(24 * time.Hour)
	}
	refresh := resp.ThisUpdate.Add(next.Sub(resp.ThisUpdate) / 2)
	return raw, refresh, nil
}

// staple refreshes the OCSP responses that are half-way to their next
// update.
func (o *orderer) staple(ctx context.Context, view *state.Snap) {
	now := o.Now()
	for _, c := range view.Certificates() {
		if len(c.Ocsp) == 0 || c.OcspNextUpdate == nil || now.Before(c.OcspNextUpdate.AsTime()) {
			continue
		}
		cl, err := o.account(ctx)
		if err != nil {
			return
		}
		leaf, issuer, err := leafAndIssuer(c.ChainPem)
		if err != nil {
			continue
		}
		resp, next, err := fetchOCSP(ctx, cl.HTTPClient, leaf, issuer)
		if err != nil {
			o.Logger.Warn("refreshing the OCSP response", "domain", c.Domain, "error", err)
			next = now.Add(time.Hour)
			resp = c.Ocsp
		}
		crt := cloneCert(c)
		crt.Ocsp, crt.OcspNextUpdate = resp, timestamppb.New(next)
		if _, err := o.put(ctx, crt, c.ModifyIndex); err != nil {
			o.Logger.Warn("keeping the OCSP response", "domain", c.Domain, "error", err)
		}
	}
}

// leafAndIssuer parses the first two certificates of a PEM chain.
func leafAndIssuer(chainPEM string) (*x509.Certificate, []byte, error) {
	ders := pemBlocks([]byte(chainPEM))
	if len(ders) < 2 {
		return nil, nil, errors.New("the chain has no issuer")
	}
	leaf, err := x509.ParseCertificate(ders[0])
	return leaf, ders[1], err
}
