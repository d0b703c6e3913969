package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"corpus/images/oci/ocitest"
)

// TestImageCacheCLI: `corpus image list` shows the image a guest was
// made from on its node, with its digest, size and the guest; `image
// rm` of it is refused naming the guest, and changes nothing; once the
// guest is gone `image prune` removes it and says what it freed; the
// agent's metrics follow the cache.
func TestImageCacheCLI(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")
	reg, tr := registryIn(t, a.node.ns)
	ref := reg + "/team/app:1"
	digest := ocitest.Push(t, ref, ocitest.Image(t, v1.Config{Cmd: []string{"/bin/sleep", "1000"}, Env: []string{"PATH=/bin"}},
		ocitest.BusyboxLayer(t)), remote.WithTransport(tr))

	c.mustCLI("guest", "create", "app", "--image", ref)
	type image struct {
		Node      string   `json:"node"`
		Name      string   `json:"name"`
		Digest    string   `json:"digest"`
		SizeBytes string   `json:"size_bytes"` // int64: a string in JSON
		Guests    []string `json:"guests"`
	}
	list := func() []image {
		t.Helper()
		var v struct {
			Images []image `json:"images"`
		}
		if err := c.json(&v, "image", "list", "--node", "n1"); err != nil {
			t.Fatal(err)
		}
		return v.Images
	}
	imgs := list()
	i := slices.IndexFunc(imgs, func(img image) bool { return img.Digest == digest })
	if i < 0 {
		t.Fatalf("image list --node n1 = %+v, want the image of digest %s", imgs, digest)
	}
	if img := imgs[i]; img.Node != "n1" || img.Name != ref || !slices.Equal(img.Guests, []string{"app"}) || img.SizeBytes == "" || img.SizeBytes == "0" {
		t.Errorf("image list: %+v, want %s on n1, used by app, with its size", img, ref)
	}
	if out := c.mustCLI("image", "list"); !strings.Contains(out, ref) || !strings.Contains(out, "app") {
		t.Errorf("image list does not show %s used by app:\n%s", ref, out)
	}
	scrape := func() (bytes, images float64) {
		t.Helper()
		body := string(scrapeWith(t, httpIn(a.node.ns), "http://127.0.0.1:9465/metrics"))
		read := func(name string) float64 {
			m := regexp.MustCompile(`(?m)^` + name + `\{driver="lxc"\} (\S+)$`).FindStringSubmatch(body)
			if m == nil {
				t.Fatalf("the agent's metrics have no %s for lxc", name)
			}
			v, _ := strconv.ParseFloat(m[1], 64)
			return v
		}
		return read("corpus_image_cache_bytes"), read("corpus_image_cache_images")
	}
	if b, n := scrape(); b <= 0 || n < 1 {
		t.Errorf("metrics: corpus_image_cache_bytes %v, corpus_image_cache_images %v; want the image counted", b, n)
	}

	// In use: refused, the guest named, the image kept.
	_, errOut, code := c.cli("image", "rm", "n1", ref)
	if code == 0 || !strings.Contains(errOut, "app") || !strings.Contains(errOut, "delete them first") {
		t.Errorf("image rm of a used image = exit %d, %q; want a refusal naming guest app", code, errOut)
	}
	if !slices.ContainsFunc(list(), func(img image) bool { return img.Digest == digest }) {
		t.Errorf("a refused image rm removed the image")
	}
	if _, errOut, code := c.cli("image", "rm", "n1", "nope:1"); code == 0 || !strings.Contains(errOut, "no image") {
		t.Errorf("image rm of an image the node lacks = exit %d, %q; want a clear not-found", code, errOut)
	}

	// Once the guest is gone, prune removes it.
	c.mustCLI("guest", "delete", "app")
	eventually(t, 60*time.Second, "the guest gone from n1's images", func() error {
		for _, img := range list() {
			if len(img.Guests) > 0 {
				return fmt.Errorf("image %s still used by %v", img.Name, img.Guests)
			}
		}
		return nil
	})
	var pruned struct {
		Removed []image `json:"removed"`
		Freed   string  `json:"freed_bytes"`
	}
	if err := c.json(&pruned, "image", "prune", "--node", "n1"); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(pruned.Removed, func(img image) bool { return img.Digest == digest }) || pruned.Freed == "" || pruned.Freed == "0" {
		t.Errorf("image prune = %+v, want the image removed and bytes freed", pruned)
	}
	if left := list(); len(left) != 0 {
		t.Errorf("image list after prune = %+v, want none", left)
	}
	if b, n := scrape(); b != 0 || n != 0 {
		t.Errorf("metrics after prune: bytes %v, images %v; want 0 and 0", b, n)
	}
	if out := c.mustCLI("image", "prune", "--node", "n1"); !strings.Contains(out, "0 images removed") {
		t.Errorf("a second prune = %q, want nothing removed", out)
	}
}
