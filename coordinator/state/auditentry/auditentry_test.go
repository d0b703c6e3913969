package auditentry

import (
	"errors"
	"strings"
	"testing"

	corpusv1 "corpus/proto/corpus/v1"
)

func TestOfNamesKeysNotValues(t *testing.T) {
	cmd := &corpusv1.Command{Actor: "ann", Cmd: &corpusv1.Command_SetConfig{SetConfig: &corpusv1.SetConfig{
		Project: "shop", Env: "prod", Set: map[string][]byte{"TOKEN": []byte("s3cret"), "A": []byte("1")}, Unset: []string{"OLD"},
	}}}
	e := Of(cmd, 7, 2, nil)
	if e.Action != "set_config" || e.Target != "shop/prod (set A, TOKEN; unset OLD)" || e.Actor != "ann" || e.Result != "ok" || e.Index != 7 || e.Position != 2 {
		t.Errorf("Of(set config) = %+v", e)
	}
	if strings.Contains(e.String(), "s3cret") {
		t.Errorf("the entry holds a config value: %v", e)
	}
}

func TestOfSystemAndRefusal(t *testing.T) {
	e := Of(&corpusv1.Command{Cmd: &corpusv1.Command_DeleteVolume{DeleteVolume: &corpusv1.DeleteVolume{Name: "g1"}}}, 1, 0, errors.New("volume not found"))
	if e.Actor != ActorSystem || e.Action != "delete_volume" || e.Target != "g1" || e.Result != "volume not found" {
		t.Errorf("Of(refused delete) = %+v", e)
	}
	if e := Of(&corpusv1.Command{}, 1, 0, nil); e.Action != "unknown" {
		t.Errorf("Of(empty command).Action = %q, want unknown", e.Action)
	}
}

func TestTargetOfRequests(t *testing.T) {
	if got := Target(&corpusv1.ExecGuestRequest{Name: "web", Argv: []string{"sh"}}); got != "web" {
		t.Errorf("Target(exec web) = %q, want web", got)
	}
	if got := Target(nil); got != "" {
		t.Errorf("Target(nil) = %q", got)
	}
}
