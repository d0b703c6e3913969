package admission

import (
	"strings"
	"testing"
)

func TestDiffJSON(t *testing.T) {
	before := `{"name":"web","spec":{"image":"busybox","resources":{},"env":{"A":"1","B":"2"},"ports":[1,2]}}`
	after := `{"name":"web","spec":{"image":"busybox:1.36","resources":{"memoryBytes":"5"},"env":{"A":"1","C":"3"},"ports":[1]}}`
	var got []string
	for _, c := range diffJSON("x", []byte(before), []byte(after)) {
		got = append(got, c.Extension+":"+c.Field+"="+c.Value)
	}
	want := `x:spec.env.C="3" x:spec.image="busybox:1.36" x:spec.ports=[1] x:spec.resources.memoryBytes="5" x:spec.env.B=`
	if strings.Join(got, " ") != want {
		t.Errorf("diff:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	if d := diffJSON("x", []byte(before), []byte(before)); len(d) != 0 {
		t.Errorf("no change: %v", d)
	}
}
