package api_test

import (
	"fmt"
	"net/url"
	"slices"
	"testing"

	"github.com/checkpointd/checkpointd/store/storetest"
)

// eventSeqs returns the seqs of an events page, in order.
func eventSeqs(r response) []int64 {
	var out []int64
	for _, it := range r.get("items").([]any) {
		out = append(out, int64(it.(map[string]any)["seq"].(float64)))
	}
	return out
}

// TestEventsPagingReachesTheEnd proves a client that follows next_cursor
// reaches the last event exactly once, whether or not it keeps sending
// the `after` it started with: the cursor wins over `after` (a client
// that kept `after=0` used to get seqs 1–3 and the same cursor forever).
func TestEventsPagingReachesTheEnd(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		id, run, tok := h.newSession()
		path := "/v1/sessions/" + id + "/events"
		for i := range 9 {
			h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, checkpointDoc(run, tok, func(d map[string]any) {
				d["note"] = fmt.Sprint("step ", i)
			})).expect(t, 201, "")
		}
		all := eventSeqs(h.do("GET", path+"?limit=500", h.reader, nil).expect(t, 200, ""))
		if len(all) < 10 {
			t.Fatalf("only %d events to page through", len(all))
		}

		for _, after := range []string{"", "0", "2", "7"} {
			t.Run("after="+after, func(t *testing.T) {
				q := url.Values{"limit": {"3"}}
				if after != "" {
					q.Set("after", after)
				}
				var got []int64
				for pages := 0; ; pages++ {
					if pages > len(all) {
						t.Fatalf("still paging after %d pages; seqs so far %v", pages, got)
					}
					r := h.do("GET", path+"?"+q.Encode(), h.reader, nil).expect(t, 200, "")
					got = append(got, eventSeqs(r)...)
					next, _ := r.get("next_cursor").(string)
					if next == "" {
						break
					}
					q.Set("cursor", next) // `after` stays in the query, as a client building on its first URL sends it
				}
				var from int64
				if after != "" {
					from = mustInt(t, after)
				}
				var want []int64
				for _, s := range all {
					if s > from {
						want = append(want, s)
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("paged seqs %v, want %v", got, want)
				}
			})
		}

		// A cursor beside an `after` further on: the cursor still decides.
		first := h.do("GET", path+"?limit=3", h.reader, nil).expect(t, 200, "")
		r := h.do("GET", path+"?limit=3&after=8&cursor="+first.str("next_cursor"), h.reader, nil).expect(t, 200, "")
		if got := eventSeqs(r); !slices.Equal(got, all[3:6]) {
			t.Errorf("cursor after seq 3 with after=8: seqs %v, want %v", got, all[3:6])
		}
		h.do("GET", path+"?after=-1&cursor="+first.str("next_cursor"), h.reader, nil).expect(t, 422, "invalid_request")
	})
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}
