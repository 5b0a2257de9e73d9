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

// TestEventsPagingReachesTheEnd proves a client that starts at `after` and
// follows next_cursor reaches the last event exactly once, and that `after`
// beside a cursor is refused: it used to be ignored silently.
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
					q.Del("after") // the cursor says where the next page starts
					q.Set("cursor", next)
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

		// A cursor beside an `after`, whatever their values: 400 naming both.
		first := h.do("GET", path+"?limit=3", h.reader, nil).expect(t, 200, "")
		for _, after := range []string{"8", "0", "", "-1"} {
			r := h.do("GET", path+"?limit=3&after="+after+"&cursor="+first.str("next_cursor"), h.reader, nil).expect(t, 400, "invalid_query")
			var paths []string
			for _, p := range r.get("problems").([]any) {
				paths = append(paths, p.(map[string]any)["path"].(string))
			}
			if !slices.Equal(paths, []string{"after", "cursor"}) {
				t.Errorf("after=%q with cursor: problems name %v, want [after cursor]", after, paths)
			}
		}
		h.do("GET", path+"?after=-1", h.reader, nil).expect(t, 422, "invalid_request")
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
