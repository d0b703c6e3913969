package cli

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// TestScaleSaysWhyPending: `corpus scale` shows, for each instance the
// scheduler has not placed, the reason `guest show` gives.
func TestScaleSaysWhyPending(t *testing.T) {
	c := startCoordinator(t)
	c.want("project create hello --detach")
	c.want("scale hello web=2 --shared-nothing", "hello-dev-2")
	pending := regexp.MustCompile(`(?m)^Pending:\s+(.+)$`)
	var reason string
	testrun.Wait(t, 10*time.Second, "the scheduler's reason for hello-dev-2", func() error {
		out := c.want("guest show hello-dev-2")
		m := pending.FindStringSubmatch(out)
		if m == nil {
			return fmt.Errorf("guest show hello-dev-2 gives no reason:\n%s", out)
		}
		reason = strings.TrimSpace(m[1])
		return nil
	})
	out := c.want("scale hello")
	for _, want := range []string{"instance 1 (hello-dev) is pending: ", "instance 2 (hello-dev-2) is pending: " + reason + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("corpus scale hello printed:\n%s\nwant it to contain %q", out, want)
		}
	}
}
