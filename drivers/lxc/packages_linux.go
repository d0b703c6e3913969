//go:build linux && cgo

package lxc

import (
	"crypto/sha256"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"corpus/drivers"
	"corpus/internal/imageref"
	"corpus/internal/names"
)

// Debian images take packages (drivers.GuestSpec.Packages): the image
// with a set of packages is a cache of its own, built once by the debian
// template with --packages (which copies the template's base download
// cache and runs apt-get in a chroot of it) and shared by every guest
// asking for the same set; its name says the set, its cache folder a
// digest of it. The template only warns when apt fails, so the build
// checks with dpkg that every package is installed.

// packageImages are the images whose guests may ask for packages.
func packageImages() []string {
	var out []string
	for _, n := range imageNames() {
		if images[n].template.Template == "debian" {
			out = append(out, n)
		}
	}
	return out
}

// imageFor is the image a guest of spec uses: its named image, with its
// packages when it asks for some.
func imageFor(name string, packages []string) (imageSpec, error) {
	if imageref.IsReference(name) {
		if len(packages) > 0 {
			return imageSpec{}, fmt.Errorf("OCI image %s takes no packages (images that do: %s)", name, strings.Join(packageImages(), ", "))
		}
		return imageSpec{name: name, ref: true}, nil
	}
	img, ok := images[name]
	if !ok {
		return imageSpec{}, fmt.Errorf("image %q: %w", name, drivers.ErrUnknownImage)
	}
	if len(packages) == 0 {
		return img, nil
	}
	if !slices.Contains(packageImages(), name) {
		return imageSpec{}, fmt.Errorf("image %s takes no packages (images that do: %s)", name, strings.Join(packageImages(), ", "))
	}
	set := slices.Clone(packages)
	slices.Sort(set)
	set = slices.Compact(set)
	for _, p := range set {
		if !names.DebianPackage(p) {
			return imageSpec{}, fmt.Errorf("package %q is not a Debian package name", p)
		}
	}
	list := strings.Join(set, ",")
	sum := sha256.Sum256([]byte(list))
	img.name = name + " +" + list
	img.cache = fmt.Sprintf("%s-p%x", img.cache, sum[:6])
	img.template.ExtraArgs = append(slices.Clone(img.template.ExtraArgs), "--packages="+list)
	img.packages = set
	return img, nil
}

// checkPackages says which of packages dpkg in rootfs does not have
// installed; nil when all are.
func checkPackages(rootfs string, packages []string) error {
	if len(packages) == 0 {
		return nil
	}
	args := append([]string{rootfs, "dpkg-query", "--show", "--showformat=${Package} ${db:Status-Status}\\n"}, packages...)
	out, _ := exec.Command("chroot", args...).Output() // exits 1 when one is unknown; its output says which
	installed := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if pkg, status, ok := strings.Cut(line, " "); ok && status == "installed" {
			installed[strings.TrimSuffix(pkg, ":amd64")] = true
		}
	}
	var missing []string
	for _, p := range packages {
		if !installed[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("packages not installed: %s (not in the image's Debian release, or its mirror unreachable from this host; the build log is %s)",
			strings.Join(missing, ", "), filepath.Dir(rootfs)+".log")
	}
	return nil
}
