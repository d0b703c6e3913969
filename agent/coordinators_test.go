package agent

import (
	"errors"
	"slices"
	"testing"

	"connectrpc.com/connect"
)

func TestCoordinatorsFailover(t *testing.T) {
	t.Parallel()
	c := newCoordinators(coordinatorList([]string{"a:1", "b:1", "a:1"}, "c:1"), nil)
	if !slices.Equal(c.addrs, []string{"a:1", "b:1", "c:1"}) {
		t.Fatalf("coordinatorList = %v, want a, b, c", c.addrs)
	}
	unavailable := connect.NewError(connect.CodeUnavailable, errors.New("dial"))
	if got, _ := c.current(); got != "a:1" {
		t.Fatalf("current = %s, want a:1", got)
	}
	// A refusal is an answer: no failover.
	if next := c.failed("a:1", connect.NewError(connect.CodePermissionDenied, errors.New("no"))); next != "a:1" {
		t.Errorf("after a refusal, next = %s, want a:1", next)
	}
	if next := c.failed("a:1", unavailable); next != "b:1" {
		t.Errorf("after a:1 failed, next = %s, want b:1", next)
	}
	// A second caller reporting the same failure does not skip b.
	if next := c.failed("a:1", unavailable); next != "b:1" {
		t.Errorf("a repeated failure of a:1 moved to %s, want b:1", next)
	}
	c.failed("b:1", unavailable)
	if next := c.failed("c:1", unavailable); next != "a:1" {
		t.Errorf("after c:1 failed, next = %s, want a:1 (round robin)", next)
	}
}

func TestCoordinatorsLearn(t *testing.T) {
	c := newCoordinators([]string{"a:1", "b:1"}, nil)
	c.failed("a:1", connect.NewError(connect.CodeUnavailable, nil))
	// A coordinator listening on every address announces that; dialled
	// from here it would be this node.
	if added := c.learn([]string{"b:1", "c:1", "", "c:1", "[::]:7400", "0.0.0.0:7400", ":7400"}); len(added) != 1 || added[0] != "c:1" {
		t.Fatalf("learn = %v, want [c:1]", added)
	}
	if cur, _ := c.current(); cur != "b:1" {
		t.Fatalf("current after learn = %s, want b:1 (learning keeps the current one)", cur)
	}
	if next := c.failed("b:1", connect.NewError(connect.CodeUnavailable, nil)); next != "c:1" {
		t.Fatalf("after b fails: %s, want the learned c:1", next)
	}
}
