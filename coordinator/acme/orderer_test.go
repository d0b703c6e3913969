package acme

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/crypto/acme"
)

func TestRenewAtAThirdOfLifeLeft(t *testing.T) {
	nb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, life := range []time.Duration{90 * 24 * time.Hour, 6 * 24 * time.Hour, time.Hour} {
		got := RenewAt(nb, nb.Add(life))
		if left := nb.Add(life).Sub(got); left != life/3 {
			t.Errorf("life %v: renewed with %v left, want %v", life, left, life/3)
		}
	}
}

func TestBackoffDoublesToACap(t *testing.T) {
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute}
	for i, w := range want {
		if got := Backoff(int32(i + 1)); got != w {
			t.Errorf("Backoff(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := Backoff(100); got != retryMax {
		t.Errorf("Backoff(100) = %v, want the cap %v", got, retryMax)
	}
}

func TestDescribeKeepsTheCAsWords(t *testing.T) {
	err := &acme.Error{ProblemType: "urn:ietf:params:acme:error:rateLimited", Detail: "too many certificates already issued"}
	if got := describe(errors.Join(errors.New("new order"), err)); got != "too many certificates already issued (urn:ietf:params:acme:error:rateLimited)" {
		t.Errorf("describe = %q", got)
	}
}
