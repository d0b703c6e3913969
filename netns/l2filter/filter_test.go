package l2filter

import (
	"errors"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want error
	}{
		{Config{}, nil},
		{Config{Table: "corpus-l2", PortPrefix: "cg"}, nil},
		{Config{Table: "t_2"}, nil},
		{Config{Table: "2t"}, ErrInvalid},
		{Config{Table: "has space"}, ErrInvalid},
		{Config{Table: "a;delete table"}, ErrInvalid},
		{Config{PortPrefix: "cg/"}, ErrInvalid},
		{Config{PortPrefix: "0123456789abcdef"}, ErrInvalid},
	} {
		if err := tc.cfg.Validate(); !errors.Is(err, tc.want) {
			t.Errorf("%+v.Validate() = %v, want %v", tc.cfg, err, tc.want)
		}
		if _, err := New(tc.cfg); !errors.Is(err, tc.want) {
			t.Errorf("New(%+v) = %v, want %v", tc.cfg, err, tc.want)
		}
	}
}
