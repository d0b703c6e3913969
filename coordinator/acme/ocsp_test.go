package acme

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/crypto/ocsp"
)

// testCA makes a CA and a leaf it signs naming responder as its OCSP
// server.
func testCA(t *testing.T, responder string) (ca *x509.Certificate, caKey *ecdsa.PrivateKey, leaf *x509.Certificate) {
	t.Helper()
	caKey, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(der)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(42), Subject: pkix.Name{CommonName: "a.test"}, DNSNames: []string{"a.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), OCSPServer: []string{responder}}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ = x509.ParseCertificate(der)
	return ca, caKey, leaf
}

// TestFetchOCSP: the response of the leaf's responder is kept and
// refreshed half-way to its next update; a revoked leaf or a certificate
// without a responder gives none.
func TestFetchOCSP(t *testing.T) {
	var ca *x509.Certificate
	var caKey *ecdsa.PrivateKey
	status := ocsp.Good
	thisUpdate := time.Now().Truncate(time.Second)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, err := ocsp.ParseRequest(body)
		if err != nil || r.Header.Get("Content-Type") != "application/ocsp-request" {
			http.Error(w, "bad request", 400)
			return
		}
		resp, err := ocsp.CreateResponse(ca, ca, ocsp.Response{Status: status, SerialNumber: req.SerialNumber,
			ThisUpdate: thisUpdate, NextUpdate: thisUpdate.Add(4 * time.Hour)}, caKey)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Write(resp)
	}))
	defer srv.Close()
	var leaf *x509.Certificate
	ca, caKey, leaf = testCA(t, srv.URL)

	raw, refresh, err := fetchOCSP(t.Context(), srv.Client(), leaf, ca.Raw)
	if err != nil {
		t.Fatalf("fetchOCSP = %v", err)
	}
	if _, err := ocsp.ParseResponseForCert(raw, leaf, ca); err != nil {
		t.Errorf("the kept response does not parse for the leaf: %v", err)
	}
	if want := thisUpdate.Add(2 * time.Hour); !refresh.Equal(want) {
		t.Errorf("refresh at %v, want half-way %v", refresh, want)
	}
	status = ocsp.Revoked
	if _, _, err := fetchOCSP(t.Context(), srv.Client(), leaf, ca.Raw); err == nil {
		t.Error("a revoked certificate's response was kept")
	}
	leaf.OCSPServer = nil
	if _, _, err := fetchOCSP(t.Context(), srv.Client(), leaf, ca.Raw); !errors.Is(err, errNoOCSP) {
		t.Errorf("without a responder = %v, want errNoOCSP", err)
	}
}
