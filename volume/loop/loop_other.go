//go:build !linux

package loop

import (
	"context"
	"fmt"
	"io"

	"corpus/volume"
)

// New returns an error wrapping volume.ErrNotSupported on this OS.
func New(cfg Config) (*Backend, error) {
	return nil, fmt.Errorf("loop volumes: %w", volume.ErrNotSupported)
}

func (b *Backend) Create(ctx context.Context, name string, size int64) error {
	return volume.ErrNotSupported
}
func (b *Backend) Attach(ctx context.Context, name string) (string, error) {
	return "", volume.ErrNotSupported
}
func (b *Backend) Detach(ctx context.Context, name string) error { return volume.ErrNotSupported }
func (b *Backend) Mount(ctx context.Context, name, target string) error {
	return volume.ErrNotSupported
}
func (b *Backend) Unmount(ctx context.Context, name string) error { return volume.ErrNotSupported }
func (b *Backend) Grow(ctx context.Context, name string, size int64) error {
	return volume.ErrNotSupported
}
func (b *Backend) Shrink(ctx context.Context, name string, size int64, allowShrink bool) error {
	return volume.ErrNotSupported
}
func (b *Backend) Trim(ctx context.Context, name string) (int64, error) {
	return 0, volume.ErrNotSupported
}
func (b *Backend) Stat(ctx context.Context, name string) (volume.Info, error) {
	return volume.Info{}, volume.ErrNotSupported
}
func (b *Backend) List(ctx context.Context) ([]volume.Info, error) {
	return nil, volume.ErrNotSupported
}
func (b *Backend) Delete(ctx context.Context, name string, force bool) error {
	return volume.ErrNotSupported
}
func (b *Backend) Export(ctx context.Context, name string, w io.Writer, progress func(done, total int64)) error {
	return volume.ErrNotSupported
}
func (b *Backend) Import(ctx context.Context, name string, r io.Reader, size int64, progress func(done, total int64)) error {
	return volume.ErrNotSupported
}
