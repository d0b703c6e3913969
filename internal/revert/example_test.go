package revert_test

import (
	"errors"
	"fmt"

	"corpus/internal/revert"
)

func Example() {
	build := func(failAt string) error {
		r := revert.New()
		defer r.Fail()
		for _, step := range []string{"bridge", "veth", "nat rule"} {
			if step == failAt {
				return errors.New(step + " failed")
			}
			fmt.Println("made", step)
			r.Add(func() { fmt.Println("undid", step) })
		}
		r.Success()
		return nil
	}
	fmt.Println(build("nat rule"))
	// Output:
	// made bridge
	// made veth
	// undid veth
	// undid bridge
	// nat rule failed
}
