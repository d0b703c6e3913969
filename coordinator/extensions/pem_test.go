package extensions

import (
	"encoding/pem"
	"testing"

	"corpus/internal/pki"
)

func pemOf(der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// mustOtherCert is a CA certificate that vouches for no test server.
func mustOtherCert(t *testing.T) []byte {
	t.Helper()
	certPEM, _, err := pki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(certPEM)
	return b.Bytes
}
