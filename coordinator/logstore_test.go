package coordinator

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// TestLogStoreMigrates: a replica's bbolt log of an earlier version
// (entries from 11 on, the head trimmed by a snapshot, a term and a vote)
// stays as it is until marked (the group allows the move); then it is in
// the write-ahead log after openLogStore, entry for entry; raft.db is a
// folder an earlier version cannot open; opening again changes nothing,
// and a copy cut short is made again.
func TestLogStoreMigrates(t *testing.T) {
	for _, cut := range []bool{false, true} {
		t.Run(fmt.Sprintf("interrupted=%v", cut), func(t *testing.T) {
			dir := t.TempDir()
			bolt, err := raftboltdb.NewBoltStore(filepath.Join(dir, boltLog))
			if err != nil {
				t.Fatal(err)
			}
			var want []*raft.Log
			for i := uint64(11); i <= 1300; i++ {
				want = append(want, &raft.Log{Index: i, Term: 2 + i/500, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry %d", i))})
			}
			if err := bolt.StoreLogs(want); err != nil {
				t.Fatal(err)
			}
			for k, v := range map[string]uint64{"CurrentTerm": 4, "LastVoteTerm": 3} {
				if err := bolt.SetUint64([]byte(k), v); err != nil {
					t.Fatal(err)
				}
			}
			if err := bolt.Set([]byte("LastVoteCand"), []byte("10.0.0.2:7401")); err != nil {
				t.Fatal(err)
			}
			bolt.Close()
			if cut {
				// A copy that stopped half way: its folder is not the WAL yet.
				if err := os.MkdirAll(filepath.Join(dir, walDir+".tmp"), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, walDir+".tmp", "00000000000000000001-0000000000000011.wal"), []byte("half"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if !hasRaftState(dir) {
				t.Fatal("hasRaftState = false with a bbolt log")
			}
			// Until the group allows the move, the replica stays on bbolt.
			logs, err := openLogStore(dir, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := logs.(*raftboltdb.BoltStore); !ok {
				t.Fatalf("before the mark, openLogStore = %T, want the bbolt log", logs)
			}
			checkLog(t, logs, want)
			logs.Close()
			if err := markWALNext(dir); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				logs, err := openLogStore(dir, hclog.NewNullLogger())
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := logs.(*wal); !ok {
					t.Fatalf("after the mark, openLogStore = %T, want the write-ahead log", logs)
				}
				checkLog(t, logs, want)
				if err := logs.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if fi, err := os.Stat(filepath.Join(dir, boltLog)); err != nil || !fi.IsDir() {
				t.Fatalf("raft.db after the move: %v, %v; want a folder", fi, err)
			}
			if _, err := raftboltdb.NewBoltStore(filepath.Join(dir, boltLog)); err == nil {
				t.Fatal("an earlier version's bbolt store opened raft.db after the move")
			}
			if _, err := os.Stat(filepath.Join(dir, walDir+".tmp")); !os.IsNotExist(err) {
				t.Fatalf("wal.tmp left behind: %v", err)
			}
			if !hasRaftState(dir) {
				t.Fatal("hasRaftState = false with a WAL")
			}
			if _, err := os.Stat(filepath.Join(dir, walNext)); !os.IsNotExist(err) {
				t.Fatalf("the mark is left after the move: %v", err)
			}
		})
	}
}

// TestLogStoreNew: a new replica's log is a WAL, raft.db a folder, and
// it holds nothing until written.
func TestLogStoreNew(t *testing.T) {
	dir := t.TempDir()
	if hasRaftState(dir) {
		t.Fatal("hasRaftState = true in an empty folder")
	}
	logs, err := openLogStore(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	if last, err := logs.LastIndex(); err != nil || last != 0 {
		t.Fatalf("LastIndex = %d, %v; want 0", last, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, boltLog)); err != nil || !fi.IsDir() {
		t.Fatalf("raft.db of a new replica: %v, %v; want a folder", fi, err)
	}
}

func checkLog(t *testing.T, logs logStore, want []*raft.Log) {
	t.Helper()
	first, _ := logs.FirstIndex()
	last, _ := logs.LastIndex()
	if first != want[0].Index || last != want[len(want)-1].Index {
		t.Fatalf("log holds %d..%d, want %d..%d", first, last, want[0].Index, want[len(want)-1].Index)
	}
	for _, w := range want {
		var got raft.Log
		if err := logs.GetLog(w.Index, &got); err != nil {
			t.Fatalf("GetLog(%d) = %v", w.Index, err)
		}
		if got.Term != w.Term || got.Type != w.Type || !bytes.Equal(got.Data, w.Data) {
			t.Fatalf("entry %d = term %d %q, want term %d %q", w.Index, got.Term, got.Data, w.Term, w.Data)
		}
	}
	for k, v := range map[string]uint64{"CurrentTerm": 4, "LastVoteTerm": 3} {
		if got, err := logs.GetUint64([]byte(k)); err != nil || got != v {
			t.Fatalf("%s = %d, %v; want %d", k, got, err, v)
		}
	}
	if got, err := logs.Get([]byte("LastVoteCand")); err != nil || string(got) != "10.0.0.2:7401" {
		t.Fatalf("LastVoteCand = %q, %v", got, err)
	}
}
