package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestDevBannerPrintsTheOpsToken: `corpus dev` hands the operator token
// to whoever started it, with the file it is kept in.
func TestDevBannerPrintsTheOpsToken(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	devBanner{API: "127.0.0.1:7400", Metrics: "http://127.0.0.1:9464/metrics", OpsToken: "cops_0123abcd", OpsTokenFile: "/var/lib/corpus/dev/coordinator/ops-token", Env: "dev"}.write(&out)
	for _, want := range []string{"operator token    cops_0123abcd\n", "(also in /var/lib/corpus/dev/coordinator/ops-token)", "https://127.0.0.1:7400", "metrics           http://127.0.0.1:9464/metrics"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("corpus dev printed:\n%s\nwant it to contain %q", out.String(), want)
		}
	}
}
