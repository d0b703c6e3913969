package api

import (
	"fmt"
	"path"
	"strings"
	"unicode"

	"corpus/coordinator/state"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// Guest defaults, applied when a request leaves a field unset.
const (
	DefaultDriver      = "lxc"
	DefaultMemoryBytes = 256 << 20
	DefaultCPUMillis   = 250
	DefaultDiskBytes   = 1 << 30

	minMemoryBytes = 16 << 20
	minCPUMillis   = 10
	maxEnvVars     = 128
)

func notFound(kind, name, hint string) error {
	return fmt.Errorf("%s %q: %w (list them with `%s`)", kind, name, state.ErrNotFound, hint)
}

// normalizeSpec fills defaults and validates a guest spec in place.
func normalizeSpec(spec *corpusv1.GuestSpec) error {
	if spec.Driver == "" {
		spec.Driver = DefaultDriver
	}
	if err := names.Validate("driver", spec.Driver); err != nil {
		return err
	}
	if spec.Image == "" {
		return invalidf("an image is required (for example --image busybox)")
	}
	if len(spec.Image) > 255 || strings.IndexFunc(spec.Image, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}) >= 0 {
		return invalidf("image %q is not a valid image name", spec.Image)
	}
	if spec.Resources == nil {
		spec.Resources = &corpusv1.Resources{}
	}
	r := spec.Resources
	if r.MemoryBytes == 0 {
		r.MemoryBytes = DefaultMemoryBytes
	}
	if r.CpuMillis == 0 {
		r.CpuMillis = DefaultCPUMillis
	}
	if r.DiskBytes == 0 {
		r.DiskBytes = DefaultDiskBytes
	}
	switch {
	case r.MemoryBytes < minMemoryBytes:
		return invalidf("memory %d bytes is below the minimum of %d MiB", r.MemoryBytes, minMemoryBytes>>20)
	case r.CpuMillis < minCPUMillis:
		return invalidf("cpu %d millicores is below the minimum of %dm (a hundredth of a core)", r.CpuMillis, minCPUMillis)
	case r.DiskBytes < 0:
		return invalidf("disk %d bytes is negative", r.DiskBytes)
	}
	if err := normalizePorts(spec.Ports); err != nil {
		return err
	}
	if err := normalizeVolume(spec); err != nil {
		return err
	}
	if err := normalizeConstraints(spec); err != nil {
		return err
	}
	if len(spec.Env) > maxEnvVars {
		return invalidf("%d environment variables; the limit is %d", len(spec.Env), maxEnvVars)
	}
	for k, v := range spec.Env {
		if !names.EnvVar(k) {
			return invalidf("environment variable name %q must match [A-Za-z_][A-Za-z0-9_]*", k)
		}
		if strings.ContainsAny(v, "\x00\n") {
			return invalidf("environment variable %s has a NUL or newline in its value", k)
		}
	}
	return nil
}

// guestStatus is the one-word summary of a guest, as view has it.
func guestStatus(view *state.Snap, g *corpusv1.Guest) string {
	switch {
	case g.DesiredState == state.DesiredDeleted:
		return "deleting"
	case g.NodeId == "":
		return "pending"
	case view.Node(g.NodeId).GetStatus() == state.NodeDown:
		return corpusv1.GuestLost
	case g.Observed == nil:
		return "placed"
	}
	return g.Observed.State
}

// normalizeConstraints validates a guest's label constraints.
func normalizeConstraints(spec *corpusv1.GuestSpec) error {
	if len(spec.Constraints) == 0 {
		spec.Constraints = nil
		return nil
	}
	for k, v := range spec.Constraints {
		if k == "mode" {
			return invalidf("mode is not a label: a node's mode takes the guests of project environments (corpus project create --env %s)", v)
		}
		if v == "" {
			return invalidf("constraint %s has no value: want LABEL=VALUE", k)
		}
		if err := validLabel(k, v); err != nil {
			return err
		}
	}
	return nil
}

// Volume limits (the loop backend's: 32 MiB to 64 TiB).
const (
	minVolumeBytes = 32 << 20
	maxVolumeBytes = 64 << 40
)

// normalizeVolume validates a guest's volume request in place.
func normalizeVolume(spec *corpusv1.GuestSpec) error {
	v := spec.Volume
	if v == nil {
		return nil
	}
	if v.SizeBytes == 0 && v.UseVolume == "" {
		spec.Volume = nil
		return nil
	}
	if v.UseVolume != "" {
		if v.SizeBytes != 0 {
			return invalidf("give a size for a new volume or --use-volume for an existing one, not both")
		}
		if err := names.Validate("volume", v.UseVolume); err != nil {
			return err
		}
	} else if v.SizeBytes < minVolumeBytes || v.SizeBytes > maxVolumeBytes {
		return invalidf("volume size %d bytes is out of range (32 MiB to 64 TiB)", v.SizeBytes)
	}
	if v.Path == "" {
		v.Path = state.DefaultVolumePath
	}
	if !path.IsAbs(v.Path) || path.Clean(v.Path) != v.Path || v.Path == "/" || strings.ContainsAny(v.Path, " \t\n\x00") {
		return invalidf("volume path %q must be a clean absolute path inside the guest, not /, without spaces", v.Path)
	}
	return nil
}
