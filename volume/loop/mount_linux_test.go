package loop

import "testing"

func TestParseMountinfo(t *testing.T) {
	t.Parallel()
	data := []byte(`22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 22 7:3 / /var/lib/corpus/a\040b rw,noatime - ext4 /dev/loop3 rw
91 22 7:3 / /srv/data rw,noatime - ext4 /dev/loop3 rw
92 22 7:30 / /other rw - ext4 /dev/loop30 rw
`)
	got := parseMountinfo(data, "7:3")
	if len(got) != 2 || got[0] != "/var/lib/corpus/a b" || got[1] != "/srv/data" {
		t.Errorf("parseMountinfo = %q, want [/var/lib/corpus/a b /srv/data]", got)
	}
}
