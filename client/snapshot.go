package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"

	"connectrpc.com/connect"

	"corpus/internal/atomicfile"
	"corpus/internal/snapshotfile"
	corpusv1 "corpus/proto/corpus/v1"
)

// SaveSnapshot takes a snapshot of the control plane into the file at
// path, sealed with a key derived here from secret (the secret does not
// leave this process). The file appears whole or not at all. progress, if
// set, is told the payload's bytes received and expected.
func (c *Clients) SaveSnapshot(ctx context.Context, path string, secret []byte, progress func(done, total uint64)) (*corpusv1.SnapshotHeader, error) {
	key, err := snapshotfile.NewKey(secret)
	if err != nil {
		return nil, err
	}
	stream, err := c.Snapshots.SaveSnapshot(ctx, connect.NewRequest(&corpusv1.SaveSnapshotRequest{Key: key.Bytes}))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var (
		h    *corpusv1.SnapshotHeader
		file bytes.Buffer
		sum  = sha256.New()
		got  uint64
	)
	for stream.Receive() {
		msg := stream.Msg()
		if msg.Header != nil {
			if h != nil {
				return nil, errors.New("the coordinator sent two snapshot headers")
			}
			h = msg.Header
			key.Describe(h)
			if err := snapshotfile.Encode(&file, h); err != nil {
				return nil, err
			}
			continue
		}
		if h == nil {
			return nil, errors.New("the coordinator sent snapshot data before its header")
		}
		file.Write(msg.Data)
		sum.Write(msg.Data)
		got += uint64(len(msg.Data))
		if progress != nil {
			progress(got, h.PayloadSize)
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("the coordinator sent no snapshot")
	}
	if got != h.PayloadSize || !bytes.Equal(sum.Sum(nil), h.PayloadSha256) {
		return nil, fmt.Errorf("the snapshot received (%d bytes) does not match its header's size (%d) and checksum: nothing written, try again", got, h.PayloadSize)
	}
	if err := atomicfile.Write(path, file.Bytes(), 0o600); err != nil {
		return nil, err
	}
	return h, nil
}

// InspectSnapshot reads a snapshot file's header and checks its payload
// against the header's checksum; no key is needed.
func InspectSnapshot(path string) (*corpusv1.SnapshotHeader, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	h, _, err := snapshotfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

// RestoreSnapshot sends the snapshot file at path to the cluster, whose
// leader installs it into the running group: every replica ends with its
// state. The file is checked here first (checksum, key); the key is
// derived here from secret, which does not leave this process. force
// restores a snapshot of another cluster (see RestoreSnapshotRequest).
// progress, if set, is told the payload's bytes sent and their total.
func (c *Clients) RestoreSnapshot(ctx context.Context, path string, secret []byte, force bool, progress func(done, total uint64)) (*corpusv1.RestoreSnapshotResponse, error) {
	h, payload, err := snapshotfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	key, err := snapshotfile.DeriveKey(h, secret)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := snapshotfile.OpenWithKey(h, payload, key); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	stream := c.Snapshots.RestoreSnapshot(ctx)
	// A refused restore's Send says io.EOF; CloseAndReceive says why.
	err = stream.Send(&corpusv1.RestoreSnapshotRequest{Header: h, Key: key, Force: force})
	var sent uint64
	if err == nil {
		err = snapshotfile.Chunks(payload, func(b []byte) error {
			if err := stream.Send(&corpusv1.RestoreSnapshotRequest{Data: b}); err != nil {
				return err
			}
			sent += uint64(len(b))
			if progress != nil {
				progress(sent, h.PayloadSize)
			}
			return nil
		})
	}
	res, cerr := stream.CloseAndReceive()
	if cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}
