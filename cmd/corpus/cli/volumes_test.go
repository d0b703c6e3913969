package cli

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"

	corpusv1 "corpus/proto/corpus/v1"
)

// TestPrintVolumeRow: a volume is listed at the size its node has; while
// that is not the desired size, STATE says whether the node is on it or
// has refused it.
func TestPrintVolumeRow(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	for _, tc := range []struct {
		name string
		v    *corpusv1.Volume
		want string
	}{
		{"at its size", &corpusv1.Volume{Name: "db", SizeBytes: 256 * mib,
			Observed: &corpusv1.VolumeObserved{State: "ready", SizeBytes: 256 * mib, UsedBytes: 200 * mib}},
			"db 256Mi 200Mi 0B n1 - ready"},
		{"trim refused", &corpusv1.Volume{Name: "db", SizeBytes: 128 * mib,
			Observed: &corpusv1.VolumeObserved{State: "ready", SizeBytes: 256 * mib, UsedBytes: 200 * mib, RefusedSizeBytes: 128 * mib}},
			"db 256Mi 200Mi 0B n1 - not resized to 128Mi"},
		{"being resized", &corpusv1.Volume{Name: "db", SizeBytes: 512 * mib,
			Observed: &corpusv1.VolumeObserved{State: "ready", SizeBytes: 256 * mib}},
			"db 256Mi 0B 0B n1 - resizing to 512Mi"},
		{"not made yet", &corpusv1.Volume{Name: "db", SizeBytes: 64 * mib}, "db 64Mi 0B 0B n1 - -"},
	} {
		var b bytes.Buffer
		w := tabwriter.NewWriter(&b, 0, 4, 1, ' ', 0)
		printVolumeRow(w, &corpusv1.VolumeView{Volume: tc.v, NodeName: "n1"})
		w.Flush()
		if got := strings.Join(strings.Fields(b.String()), " "); got != strings.Join(strings.Fields(tc.want), " ") {
			t.Errorf("%s: row = %q, want %q", tc.name, got, tc.want)
		}
	}
}
