// Package snapshotfile is the format of a control-plane snapshot file:
//
//	"corpus-snapshot\n" | uint32 header length (big endian) | header | payload
//
// The header (corpusv1.SnapshotHeader, protobuf) is in clear: format
// version, cluster id, Raft index and term, corpus version, creation
// time, object counts, the SHA-256 of the payload and the parameters of
// the key derivation. The payload is a corpusv1.SnapshotContents (the
// state machine's snapshot and the cluster CA) sealed by internal/seal
// with a key derived by scrypt from the operator's secret, for a place
// naming the cluster and index, so a header edited to name another
// cluster or index does not open.
//
// The client derives the key (NewKey) and hands it to the leader, which
// seals the payload (Seal); the secret never leaves the client. A restore
// reads the file (Read), checks its checksum and opens it with the
// secret (Open); a restore into a running group derives the key on the
// client (DeriveKey) and the leader opens the payload (OpenWithKey).
package snapshotfile

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/crypto/scrypt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/internal/atomicfile"
	"corpus/internal/seal"
	"corpus/internal/version"
	corpusv1 "corpus/proto/corpus/v1"
)

// FormatVersion is the version of the files this build writes; it reads
// this one and older.
const FormatVersion = 1

// Magic starts every snapshot file.
const Magic = "corpus-snapshot\n"

// maxHeader bounds the header a reader accepts.
const maxHeader = 1 << 20

// The scrypt cost of new keys (about 100 ms and 32 MiB) and the bounds a
// reader accepts from a header.
const (
	kdfName = "scrypt"
	logN    = 15
	kdfR    = 8
	kdfP    = 1
	maxLogN = 20
)

// MinSecret is the shortest secret accepted.
const MinSecret = 16

var (
	// ErrNotSnapshot: the file is not a corpus snapshot.
	ErrNotSnapshot = errors.New("not a corpus snapshot file")
	// ErrNewerFormat: the file was written by a newer corpus.
	ErrNewerFormat = errors.New("snapshot written in a newer format than this corpus reads")
	// ErrCorrupt: the file is truncated or damaged.
	ErrCorrupt = errors.New("snapshot file is damaged")
	// ErrWrongKey: the payload does not open with the secret given.
	ErrWrongKey = errors.New("snapshot does not open with this key")
	// ErrOtherCluster: a restore into a running group was given a
	// snapshot of another cluster, without force.
	ErrOtherCluster = errors.New("snapshot of another cluster")
)

// ChunkSize is the size of a payload's chunks on the API's streams,
// well under its bound on a message.
const ChunkSize = 1 << 20

// Chunks hands payload to send in ChunkSize parts, in order; it stops at
// send's first error.
func Chunks(payload []byte, send func([]byte) error) error {
	for len(payload) > 0 {
		n := min(len(payload), ChunkSize)
		if err := send(payload[:n]); err != nil {
			return err
		}
		payload = payload[n:]
	}
	return nil
}

// Key is a sealing key derived from the operator's secret, with the
// derivation's parameters for the header.
type Key struct {
	Bytes []byte
	salt  []byte
}

// ReadSecret reads the operator's secret (a passphrase or random bytes)
// from path; a trailing newline is not part of it.
func ReadSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the snapshot key: %w", err)
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) < MinSecret {
		return nil, fmt.Errorf("the snapshot key in %s has %d bytes, want at least %d (make one with: head -c 32 /dev/urandom | base64 > %s)", path, len(b), MinSecret, path)
	}
	return b, nil
}

// NewKey derives a key from secret with a fresh salt.
func NewKey(secret []byte) (*Key, error) {
	salt := make([]byte, 16)
	rand.Read(salt) // never fails
	k, err := scrypt.Key(secret, salt, 1<<logN, kdfR, kdfP, seal.KeySize)
	if err != nil {
		return nil, fmt.Errorf("deriving the snapshot key: %w", err)
	}
	return &Key{Bytes: k, salt: salt}, nil
}

// Describe fills h's key derivation fields.
func (k *Key) Describe(h *corpusv1.SnapshotHeader) {
	h.Kdf, h.KdfSalt, h.KdfLogN, h.KdfR, h.KdfP = kdfName, k.salt, logN, kdfR, kdfP
}

// place binds the sealed payload to the header's cluster and index.
func place(h *corpusv1.SnapshotHeader) string {
	return fmt.Sprintf("snapshot/%s/%d/%d", h.ClusterId, h.RaftIndex, h.RaftTerm)
}

// keyID names the one key of a snapshot's keyring.
const keyID = "snapshot"

// Seal seals c with key for h, and records the payload's checksum and
// size in h.
func Seal(key []byte, h *corpusv1.SnapshotHeader, c *corpusv1.SnapshotContents) ([]byte, error) {
	kr, err := seal.NewKeyring(keyID, map[string][]byte{keyID: key})
	if err != nil {
		return nil, fmt.Errorf("snapshot key: %w", err)
	}
	plain, err := proto.Marshal(c)
	if err != nil {
		return nil, err
	}
	payload, err := kr.Seal(plain, place(h))
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(payload)
	h.PayloadSha256, h.PayloadSize = sum[:], uint64(len(payload))
	return payload, nil
}

// Encode writes the magic and the header; the payload follows.
func Encode(w io.Writer, h *corpusv1.SnapshotHeader) error {
	hb, err := proto.Marshal(h)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(hb)))
	if _, err := io.WriteString(w, Magic); err != nil {
		return err
	}
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err = w.Write(hb)
	return err
}

// ReadHeader reads the magic and the header, leaving r at the payload.
func ReadHeader(r io.Reader) (*corpusv1.SnapshotHeader, error) {
	head := make([]byte, len(Magic)+4)
	if _, err := io.ReadFull(r, head); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, ErrNotSnapshot
		}
		return nil, err
	}
	if string(head[:len(Magic)]) != Magic {
		return nil, ErrNotSnapshot
	}
	n := binary.BigEndian.Uint32(head[len(Magic):])
	if n > maxHeader {
		return nil, fmt.Errorf("%w: a header of %d bytes", ErrCorrupt, n)
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, fmt.Errorf("%w: the header is cut short", ErrCorrupt)
	}
	h := &corpusv1.SnapshotHeader{}
	if err := proto.Unmarshal(hb, h); err != nil {
		return nil, fmt.Errorf("%w: the header does not decode (%v)", ErrCorrupt, err)
	}
	if err := CheckHeader(h); err != nil {
		return nil, err
	}
	return h, nil
}

// CheckHeader refuses a header of a newer format or one that lacks what
// every file has.
func CheckHeader(h *corpusv1.SnapshotHeader) error {
	if h.FormatVersion > FormatVersion {
		return fmt.Errorf("%w (format %d, this corpus reads up to %d): restore it with a corpus at least as new as %s", ErrNewerFormat, h.FormatVersion, FormatVersion, h.CorpusVersion)
	}
	if h.FormatVersion == 0 || h.ClusterId == "" || len(h.PayloadSha256) != sha256.Size {
		return fmt.Errorf("%w: the header lacks its format, cluster id or checksum", ErrCorrupt)
	}
	return nil
}

// Read reads a whole snapshot file and checks its payload against the
// header's checksum.
func Read(path string) (*corpusv1.SnapshotHeader, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	h, err := ReadHeader(f)
	if err != nil {
		return nil, nil, err
	}
	payload, err := io.ReadAll(io.LimitReader(f, int64(h.PayloadSize)+1))
	if err != nil {
		return nil, nil, err
	}
	if err := Verify(h, payload); err != nil {
		return nil, nil, err
	}
	return h, payload, nil
}

// Verify checks payload against the header's size and checksum.
func Verify(h *corpusv1.SnapshotHeader, payload []byte) error {
	if uint64(len(payload)) != h.PayloadSize {
		return fmt.Errorf("%w: the payload has %d bytes, the header says %d (truncated?)", ErrCorrupt, len(payload), h.PayloadSize)
	}
	if sum := sha256.Sum256(payload); !bytes.Equal(sum[:], h.PayloadSha256) {
		return fmt.Errorf("%w: the payload's SHA-256 differs from the header's", ErrCorrupt)
	}
	return nil
}

// Open derives the key from secret as the header says and opens the
// payload.
func Open(h *corpusv1.SnapshotHeader, payload, secret []byte) (*corpusv1.SnapshotContents, error) {
	key, err := DeriveKey(h, secret)
	if err != nil {
		return nil, err
	}
	return OpenWithKey(h, payload, key)
}

// DeriveKey derives the key of a file from secret as its header says:
// what a client hands a coordinator to open the payload with, so the
// secret stays with the client.
func DeriveKey(h *corpusv1.SnapshotHeader, secret []byte) ([]byte, error) {
	if h.Kdf != kdfName || h.KdfLogN == 0 || h.KdfLogN > maxLogN || h.KdfR == 0 || h.KdfP == 0 || h.KdfR*h.KdfP >= 1<<20 {
		return nil, fmt.Errorf("%w: key derivation %q (log N %d, r %d, p %d) is not one this corpus uses", ErrCorrupt, h.Kdf, h.KdfLogN, h.KdfR, h.KdfP)
	}
	key, err := scrypt.Key(secret, h.KdfSalt, 1<<h.KdfLogN, int(h.KdfR), int(h.KdfP), seal.KeySize)
	if err != nil {
		return nil, fmt.Errorf("deriving the snapshot key: %w", err)
	}
	return key, nil
}

// OpenWithKey opens the payload with the key DeriveKey gave.
func OpenWithKey(h *corpusv1.SnapshotHeader, payload, key []byte) (*corpusv1.SnapshotContents, error) {
	kr, err := seal.NewKeyring(keyID, map[string][]byte{keyID: key})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWrongKey, err)
	}
	plain, err := kr.Open(payload, place(h))
	if err != nil {
		return nil, fmt.Errorf("%w (or the header was altered): give the key file the snapshot was saved with", ErrWrongKey)
	}
	c := &corpusv1.SnapshotContents{}
	if err := proto.Unmarshal(plain, c); err != nil {
		return nil, fmt.Errorf("%w: the payload does not decode (%v)", ErrCorrupt, err)
	}
	if len(c.State) == 0 || len(c.CaCert) == 0 || len(c.CaKey) == 0 {
		return nil, fmt.Errorf("%w: the payload lacks the state or the cluster CA", ErrCorrupt)
	}
	return c, nil
}

// Taken is a snapshot of the state machine as Raft took it on the
// leader, with the cluster CA beside it: what a file's payload holds.
type Taken struct {
	Index, Term uint64
	// State is the state machine's snapshot (a corpusv1.Snapshot).
	State []byte
	// CACert and CAKey are the cluster CA (PEM).
	CACert, CAKey []byte
}

// NewHeader describes the state machine's snapshot state (a
// corpusv1.Snapshot) taken at Raft index and term: its cluster, the
// corpus version taking it, the time, and what it holds (the length of
// every list of the snapshot, by name). Seal adds the checksum, a Key the
// key derivation.
func NewHeader(index, term uint64, state []byte, now time.Time) (*corpusv1.SnapshotHeader, error) {
	var st corpusv1.Snapshot
	if err := proto.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("decoding the state's snapshot: %w", err)
	}
	if st.Config.GetClusterId() == "" {
		return nil, errors.New("the cluster is not bootstrapped yet: nothing to snapshot")
	}
	counts := map[string]uint64{}
	m := st.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if f.IsList() && f.Kind() == protoreflect.MessageKind {
			counts[string(f.Name())] = uint64(m.Get(f).List().Len())
		}
	}
	return &corpusv1.SnapshotHeader{
		FormatVersion: FormatVersion,
		ClusterId:     st.Config.GetClusterId(),
		RaftIndex:     index,
		RaftTerm:      term,
		CorpusVersion: fmt.Sprintf("%s (commit %s)", version.Version, version.Get().Commit),
		CreatedAt:     timestamppb.New(now),
		Counts:        counts,
	}, nil
}

// WriteFile seals c with key for h and writes the snapshot file at path,
// whole or not at all.
func WriteFile(path string, key *Key, h *corpusv1.SnapshotHeader, c *corpusv1.SnapshotContents) error {
	key.Describe(h)
	payload, err := Seal(key.Bytes, h, c)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := Encode(&b, h); err != nil {
		return err
	}
	b.Write(payload)
	return atomicfile.Write(path, b.Bytes(), 0o600)
}
