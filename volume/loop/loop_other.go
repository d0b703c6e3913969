//go:build !linux

package loop

import (
	"context"
	"fmt"
	"io"

	"corpus/volume"
)

var errOS = fmt.Errorf("loop volumes: %w on this OS", volume.ErrNotSupported)

// New returns an error wrapping errOS on this OS.
func New(cfg Config) (*Backend, error) {
	return nil, errOS
}

func (b *Backend) Create(ctx context.Context, name string, size int64) error {
	return errOS
}
func (b *Backend) Attach(ctx context.Context, name string) (string, error) {
	return "", errOS
}
func (b *Backend) Detach(ctx context.Context, name string) error { return errOS }
func (b *Backend) Mount(ctx context.Context, name, target string) error {
	return errOS
}
func (b *Backend) Unmount(ctx context.Context, name string) error { return errOS }
func (b *Backend) Grow(ctx context.Context, name string, size int64) error {
	return errOS
}
func (b *Backend) GrowDevice(ctx context.Context, name string, size int64) error {
	return errOS
}
func (b *Backend) Shrink(ctx context.Context, name string, size int64, allowShrink bool) error {
	return errOS
}
func (b *Backend) Trim(ctx context.Context, name string) (int64, error) {
	return 0, errOS
}
func (b *Backend) Stat(ctx context.Context, name string) (volume.Info, error) {
	return volume.Info{}, errOS
}
func (b *Backend) List(ctx context.Context) ([]volume.Info, error) {
	return nil, errOS
}
func (b *Backend) Delete(ctx context.Context, name string, force bool) error {
	return errOS
}
func (b *Backend) Export(ctx context.Context, name string, w io.Writer, progress func(done, total int64)) error {
	return errOS
}
func (b *Backend) Import(ctx context.Context, name string, r io.Reader, size int64, progress func(done, total int64)) error {
	return errOS
}
