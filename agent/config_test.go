package agent

import (
	"strings"
	"testing"
)

// TestValidateImageCacheMax: a cap the driver could not read stops the
// agent at start, naming the flag, instead of leaving it without its
// driver.
func TestValidateImageCacheMax(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in string
		ok bool
	}{{"", true}, {"0", true}, {"20G", true}, {"25%", true}, {"lots", false}, {"150%", false}} {
		c := Default()
		c.Name, c.ImageCacheMax = "n1", tc.in
		err := c.Validate()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "--image-cache-max")) {
			t.Errorf("Validate(image cache max %q) = %v, want ok %v (naming the flag)", tc.in, err, tc.ok)
		}
	}
}
