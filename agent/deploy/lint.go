package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"

	"connectrpc.com/connect"

	"corpus/agent/deploy/githook"
	"corpus/agent/deploy/manifest"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// maxLintFiles bounds the changed paths a lint call carries.
const maxLintFiles = 10000

// lint shows a push to the operators' lint extensions (through the
// coordinator) before its pipeline runs: the commit, the paths it
// changes against the serving commit (all on a first push), corpus.yaml
// and the Procfile. What they say goes to the push's output; refused
// names the extension that refused it ("" when none did).
func (d *deploy) lint(g quarantineGit, old, commit, author, subject string) (refused string, err error) {
	req := &corpusv1.LintPushRequest{Project: d.project, Env: d.env.Name, Commit: commit, Author: author, Subject: subject}
	if old == githook.ZeroID || old == "" {
		req.ChangedFiles = slices.Sorted(maps.Keys(d.tree.Entries))
	} else {
		raw, err := g.output("diff", "--name-only", "-z", "--no-renames", old, commit)
		if err != nil {
			return "", err
		}
		for _, p := range bytes.Split(raw, []byte{0}) {
			if len(p) > 0 {
				req.ChangedFiles = append(req.ChangedFiles, string(p))
			}
		}
	}
	if len(req.ChangedFiles) > maxLintFiles {
		req.ChangedFiles = req.ChangedFiles[:maxLintFiles]
	}
	for path, dst := range map[string]*string{manifest.File: &req.Manifest, manifest.Procfile: &req.Procfile} {
		if _, ok := d.tree.Entries[path]; ok {
			raw, err := g.output("cat-file", "blob", commit+":"+path)
			if err != nil {
				return "", err
			}
			*dst = string(raw)
		}
	}
	res, err := coordCall(d.p, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.LintPushResponse], error) {
		return c.LintPush(d.ctx, connect.NewRequest(req))
	})
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodeUnimplemented {
			return "", nil // a coordinator from before extensions
		}
		return "", err
	}
	for _, l := range res.Lines {
		d.say("-----> lint: %s", l)
	}
	if res.Refused != "" {
		return res.Refused, nil
	}
	if len(res.Lines) > 0 {
		d.say("-----> lint: passed")
	}
	return "", nil
}

// errLintRefused is a push a lint extension refused.
func errLintRefused(name string) error {
	return fmt.Errorf("refused by the lint extension %s (its lines are above)", name)
}
