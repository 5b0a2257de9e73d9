package present

import (
	"testing"

	"github.com/checkpointd/checkpointd"
)

func TestShortID(t *testing.T) {
	a := checkpointd.NewID(checkpointd.PrefixSession)
	if len(ShortID(a)) != 16 || a[4:20] != ShortID(a) {
		t.Fatalf("ShortID(%s) = %s, want its 16 hex digits after ses_", a, ShortID(a))
	}
	// Ids made as fast as one process can differ in their short form: the
	// millisecond and the sequence within it are in the first 16 digits.
	seen := map[string]string{}
	for range 20000 {
		id := checkpointd.NewID(checkpointd.PrefixSession)
		if other, ok := seen[ShortID(id)]; ok {
			t.Fatalf("%s and %s share the short id %s", other, id, ShortID(id))
		}
		seen[ShortID(id)] = id
	}
	for _, odd := range []string{"", "lease-1", "ses_abc", "ses_" + a} {
		if ShortID(odd) != odd {
			t.Errorf("ShortID(%q) = %q, want it whole", odd, ShortID(odd))
		}
	}
}

// TestEventData: an event's data in one line.
func TestEventData(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"outcome":"abandoned","reason":"issue closed","by":{"name":"ops","token_id":"tok_1"}}`,
			`outcome=abandoned reason="issue closed" by.name=ops by.token_id=tok_1`},
		{`{"seq":3,"complete":true,"missing":[],"x":null,"deep":{"a":{"b":1}}}`, `seq=3 complete=true deep.a={…} missing=[0]`},
		{``, ``},
		{`[1,2]`, ``},
		{`{"s":"a b=c"}`, `s="a b=c"`},
	} {
		if got := EventData([]byte(tc.in)); got != tc.want {
			t.Errorf("EventData(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
