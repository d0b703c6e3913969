package cli

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	corpusv1 "corpus/proto/corpus/v1"
)

func keyPair(t *testing.T, dir, name string) (string, string) {
	t.Helper()
	var out strings.Builder
	g := &Globals{stdout: &out}
	file := filepath.Join(dir, name)
	cmd := newProjectKeygenCmd(g)
	cmd.SetArgs([]string{"--out", file})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	return file, strings.TrimSpace(out.String())
}

// TestTopologyFile: a topology survives YAML; its values are written
// only encrypted and open with the importer's key alone; an unknown
// field or version is refused.
func TestTopologyFile(t *testing.T) {
	dir := t.TempDir()
	keyFile, pub := keyPair(t, dir, "k")
	otherKey, _ := keyPair(t, dir, "other")
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file %v, %v; want mode 0600", st, err)
	}
	top := &corpusv1.ProjectTopology{Version: corpusv1.TopologyVersion, Name: "site",
		Environments: []*corpusv1.EnvTopology{{Name: "prod", Image: "busybox", Domains: []string{"a.test"}, VolumeBytes: 1 << 30,
			ConfigKeys: []string{"FOO"}, Config: map[string]string{"FOO": "s3cret"}}},
		Services: []*corpusv1.ServiceTopology{{Name: "pay", ExternalUrl: "https://pay.test", SecretKeys: []string{"K"}, Secrets: map[string]string{"K": "v4lue"},
			Links: []*corpusv1.ServiceLinkTopology{{Env: "prod", As: "PAY"}}}}}
	want := proto.Clone(top).(*corpusv1.ProjectTopology)

	pk, err := topologyKEM.NewPublicKey(mustB64(t, strings.TrimPrefix(pub, pubPrefix)))
	if err != nil {
		t.Fatal(err)
	}
	if err := sealTopology(top, pk); err != nil {
		t.Fatal(err)
	}
	doc, err := topologyYAML(top)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(doc), "s3cret") || strings.Contains(string(doc), "v4lue") || !strings.Contains(string(doc), "a.test") {
		t.Fatalf("the file shows a value in clear, or lost the shape:\n%s", doc)
	}
	got, err := parseTopology(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := openTopology(proto.Clone(got).(*corpusv1.ProjectTopology), otherKey); err == nil {
		t.Error("the values opened with another key")
	}
	if err := openTopology(got, keyFile); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("round trip = %v, want %v", got, want)
	}
	for name, bad := range map[string]string{
		"unknown field":   strings.Replace(string(doc), "name: site", "name: site\nsurprise: 1", 1),
		"unknown version": strings.Replace(string(doc), corpusv1.TopologyVersion, "corpus.project/v9", 1),
		"not yaml":        "{{{",
	} {
		if _, err := parseTopology([]byte(bad)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
