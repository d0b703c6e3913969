//go:build !linux

package oci

import (
	"log/slog"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func applyBlob(root, blob string, diffID v1.Hash, log *slog.Logger) error {
	return ErrNotSupported
}

func openInTree(root, rel string) (*os.File, error) { return nil, ErrNotSupported }
