package kubernetes

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksOnlyItsGroups: the driver links the clients of the API groups
// it uses, not client-go's Clientset or informer factory, which pull in
// those of every group (about 12 MB of a binary every corpus process
// maps, whether it runs this driver or not).
func TestLinksOnlyItsGroups(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	for _, p := range []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/informers"} {
		if deps[p] {
			t.Errorf("corpus/drivers/kubernetes links %s, and with it the clients of every API group: use the typed clients of the groups it needs (clients.go)", p)
		}
	}
}
