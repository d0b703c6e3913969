package runtime

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"corpus/agent/runtime/supervisor"
	"corpus/drivers"
)

// followBatch bounds how many records one call of each gets.
const followBatch = 256

// Follow streams the journal of the guest's supervisor (the processes'
// output) from after (of run epoch) on, for d (0: until ctx ends or the
// stream breaks), calling each with the stream's header once, then with
// batches of records as they come. It returns when the stream ends.
func (r *Runtime) Follow(ctx context.Context, x Execer, guest, epoch string, after uint64, d time.Duration,
	each func(h *supervisor.FollowHeader, recs []supervisor.Record)) error {
	req, err := json.Marshal(supervisor.Request{Op: supervisor.OpFollow, Epoch: epoch, After: after, For: supervisor.Duration(d)})
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	read := make(chan error, 1)
	go func() {
		read <- readFollow(pr, each)
		pr.Close()
	}()
	var errOut bytes.Buffer
	code, err := x.Exec(ctx, guest, drivers.ExecRequest{
		Argv: []string{supervisor.Binary, "follow"}, Stdin: bytes.NewReader(req), Stdout: pw, Stderr: &errOut,
	})
	pw.Close()
	rerr := <-read
	switch {
	case err != nil:
		return err
	case code != 0:
		return fmt.Errorf("following the supervisor of guest %s: exit status %d: %s", guest, code, strings.TrimSpace(errOut.String()))
	}
	return rerr
}

func readFollow(r io.Reader, each func(h *supervisor.FollowHeader, recs []supervisor.Record)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	line, err := br.ReadBytes('\n')
	if err != nil {
		io.Copy(io.Discard, br)
		if err == io.EOF {
			return nil // nothing came: the exec says why
		}
		return err
	}
	var h supervisor.FollowHeader
	if err := json.Unmarshal(line, &h); err != nil {
		io.Copy(io.Discard, br)
		return fmt.Errorf("the supervisor's follow stream: %w", err)
	}
	if h.Error != "" {
		io.Copy(io.Discard, br)
		return fmt.Errorf("the supervisor refused to follow: %s", h.Error)
	}
	each(&h, nil)
	var batch []supervisor.Record
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && err == nil {
			var rec supervisor.Record
			if json.Unmarshal(line, &rec) == nil {
				batch = append(batch, rec)
			}
		}
		// A batch ends where the data read so far ends.
		if len(batch) > 0 && (err != nil || br.Buffered() == 0 || len(batch) >= followBatch) {
			each(nil, batch)
			batch = nil
		}
		if err != nil {
			io.Copy(io.Discard, br)
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}
