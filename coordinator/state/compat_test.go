package state_test

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/log-v1.bin and testdata/snapshot-v1.bin from this code")

// Golden files written by an earlier build of the state machine: a Raft
// log (each entry as Encode wrote it, length-prefixed) and the snapshot
// that build persisted after applying it.
var (
	goldenLog      = filepath.Join("testdata", "log-v1.bin")
	goldenSnapshot = filepath.Join("testdata", "snapshot-v1.bin")
)

// goldenCommands puts something in every table. Run with -update to
// write the golden files again (only on a format change that keeps old
// replicas' logs and snapshots readable).
func goldenCommands(t *testing.T) []*corpusv1.Command {
	k, kr := testRing(t, "k1")
	cert := &corpusv1.Certificate{Domain: "hello.test", State: state.CertValid, ChainPem: "pem", Key: sealed(t, k, "key", "private")}
	cmds := withPlacedGuest()
	cmds = append(cmds,
		reportCmd(nodeID, guestID, state.ObservedRunning, ""),
		tokenCmd("tok2", "hash2", epoch.Add(time.Hour)),
		enrollCmd("tok2", "hash2", "n2id", "n2"),
		guestCmd("g2id", "api"),
		placeCmd("g2id", "", "no room", 0),
		volumeGuestCmd("g3id", "db", &corpusv1.VolumeSpec{SizeBytes: 1 << 30, Path: "/data"}),
		addRecordCmd("d1", "www.hello.test.", "A", "192.0.2.1"),
		userCmd("alice", "ops"),
		keyCmd("alice", "fp1"),
		userTokenCmd("alice", "ut1", time.Time{}),
		keyringCmd(kr, "", nil, nil),
		projectCmd("dev", "g4id", "dev.hello.test"),
		setConfigCmd(map[string][]byte{"GREETING": sealed(t, k, "GREETING", "hi")}),
		placeCmd("g4id", nodeID, "", 0),
		beginCmd("rel1", nodeID),
		serviceCmd(t, k, "pg"),
		putCertCmd(cert, 0),
		putExtCmd("ext1", nil, nil, false),
	)
	return cmds
}

// TestGoldenLogAndSnapshot: this build applies a log an earlier build
// wrote to the state that build's snapshot holds, and restores that
// snapshot to the same state: replicas of both builds can run side by
// side in one cluster and restart from each other's snapshots.
func TestGoldenLogAndSnapshot(t *testing.T) {
	if *updateGolden {
		writeGolden(t)
	}
	logData, err := os.ReadFile(goldenLog)
	if err != nil {
		t.Fatal(err)
	}
	snapData, err := os.ReadFile(goldenSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	var want corpusv1.Snapshot
	if err := proto.Unmarshal(snapData, &want); err != nil {
		t.Fatalf("decoding %s: %v", goldenSnapshot, err)
	}

	r := newReplica(t)
	for len(logData) > 0 {
		entry, n := protowire.ConsumeBytes(logData)
		if n < 0 {
			t.Fatalf("%s: a truncated entry after index %d", goldenLog, r.index)
		}
		logData = logData[n:]
		r.index++
		r.fsm.Apply(&raft.Log{Index: r.index, Type: raft.LogCommand, Data: entry})
	}
	if got := persisted(t, r.fsm); !proto.Equal(got, &want) {
		t.Errorf("state after applying %s = %v, want %s's: %v", goldenLog, got, goldenSnapshot, &want)
	}

	restored := newReplica(t)
	if err := restored.fsm.Restore(io.NopCloser(bytes.NewReader(snapData))); err != nil {
		t.Fatalf("Restore(%s) = %v", goldenSnapshot, err)
	}
	if got := persisted(t, restored.fsm); !proto.Equal(got, &want) {
		t.Errorf("state after restoring %s = %v, want %v", goldenSnapshot, got, &want)
	}
}

// writeGolden applies goldenCommands and writes the log and the snapshot
// this build makes of them.
func writeGolden(t *testing.T) {
	r := newReplica(t)
	var log []byte
	for _, cmd := range goldenCommands(t) {
		data, err := state.Encode(proto.Clone(cmd).(*corpusv1.Command), r.now)
		if err != nil {
			t.Fatal(err)
		}
		log = protowire.AppendBytes(log, data)
		r.must(cmd)
	}
	snap, err := proto.MarshalOptions{Deterministic: true}.Marshal(persisted(t, r.fsm))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goldenLog, log, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goldenSnapshot, snap, 0o644); err != nil {
		t.Fatal(err)
	}
}
