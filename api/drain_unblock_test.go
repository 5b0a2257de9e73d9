package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestDrainSaysHowToUnblock: every blocking entry of GET /v1/drain and of
// a refused completion names the action that unblocks it, and both say in
// words when no source of evidence is configured (so unverified cannot
// clear).
func TestDrainSaysHowToUnblock(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ev         checkpointd.EvidenceSources
		parkedWant checkpointd.UnblockAction
	}{
		{"no evidence", checkpointd.EvidenceSources{}, checkpointd.UnblockConfigure},
		{"webhooks and forge", checkpointd.EvidenceSources{Webhooks: true, Forge: true}, checkpointd.UnblockWaitEvidence},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storetest.Open(t, storetest.SQLite, checkpointd.SystemClock{})
			h := newDrainHarness(t, s, s, func(d *api.Deps) { d.Evidence = tc.ev })
			a := h.agentSession("author@widgets", "acme/widgets", "author", "fix-12")
			h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")

			r := h.do("GET", "/v1/drain", h.operator, nil).expect(t, 200, "")
			var v struct {
				Evidence checkpointd.EvidenceSources `json:"evidence"`
				Notice   string                      `json:"notice"`
				Blocking []checkpointd.DrainBlocker  `json:"blocking"`
			}
			if err := json.Unmarshal(r.raw, &v); err != nil {
				t.Fatal(err)
			}
			if v.Evidence != tc.ev || (v.Notice == checkpointd.NoEvidenceNotice) != tc.ev.None() {
				t.Errorf("evidence %+v notice %q, want %+v (notice only without evidence)", v.Evidence, v.Notice, tc.ev)
			}
			if len(v.Blocking) != 1 || v.Blocking[0].Unblock == nil || v.Blocking[0].Unblock.Action != checkpointd.UnblockWrite {
				t.Fatalf("a live run that wrote nothing since the drain: %s", r.raw)
			}

			// Parked, it blocks only for being unverified: what clears that
			// depends on what the daemon can hear from.
			h.do("POST", "/v1/sessions/"+a.id+"/park", h.operator, map[string]any{"reason": "agent died"}).expect(t, 200, "")
			r = h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 409, "drain_blocked")
			var blocked struct {
				Notice   string                     `json:"notice"`
				Blocking []checkpointd.DrainBlocker `json:"blocking"`
			}
			if err := json.Unmarshal(r.raw, &blocked); err != nil {
				t.Fatal(err)
			}
			if len(blocked.Blocking) != 1 || blocked.Blocking[0].Unblock == nil || blocked.Blocking[0].Unblock.Action != tc.parkedWant {
				t.Errorf("parked and unverified: %s, want %s", r.raw, tc.parkedWant)
			}
			if (blocked.Notice != "") != tc.ev.None() {
				t.Errorf("drain_blocked notice %q with evidence %+v", blocked.Notice, tc.ev)
			}
		})
	}
}

// TestListDrains: every drain, newest first, paged; readers may read it.
func TestListDrains(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		h := newDrainHarness(t, s, s, nil)
		var ids []string
		for _, reason := range []string{"first", "second", "third"} {
			r := h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": reason}).expect(t, 201, "")
			ids = append(ids, r.str("drain", "id"))
			h.do("POST", "/v1/drain/cancel", h.operator, nil).expect(t, 200, "")
		}
		r := h.do("GET", "/v1/drains?limit=2", h.reader, nil).expect(t, 200, "")
		items := r.get("items").([]any)
		if len(items) != 2 || items[0].(map[string]any)["id"] != ids[2] || items[1].(map[string]any)["id"] != ids[1] ||
			items[0].(map[string]any)["state"] != "cancelled" {
			t.Fatalf("first page: %s", r.raw)
		}
		next := r.str("next_cursor")
		r = h.do("GET", "/v1/drains?limit=2&cursor="+next, h.reader, nil).expect(t, 200, "")
		items = r.get("items").([]any)
		if len(items) != 1 || items[0].(map[string]any)["id"] != ids[0] || items[0].(map[string]any)["reason"] != "first" {
			t.Fatalf("second page: %s", r.raw)
		}
		h.do("GET", "/v1/drains", "", nil).expect(t, 401, "unauthorized")
	})
}

// TestDrainDecisionScoped: a scoped reader reads a decision's blocking
// list only for its repos, in GET /v1/drain and GET /v1/drains; the counts
// stay whole.
func TestDrainDecisionScoped(t *testing.T) {
	s := storetest.Open(t, storetest.SQLite, checkpointd.SystemClock{})
	h := newDrainHarness(t, s, s, nil)
	mine := h.agentSession("author@widgets", "acme/widgets", "author", "fix-12")
	theirs := h.agentSession("author@gadgets", "acme/gadgets", "author", "fix-7")
	h.do("POST", "/v1/drain", h.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
	h.do("POST", "/v1/drain/complete", h.operator, nil).expect(t, 409, "drain_blocked")
	for _, path := range []string{"/v1/drain", "/v1/drains"} {
		r := h.do("GET", path, h.reader, nil).expect(t, 200, "")
		if strings.Contains(string(r.raw), theirs.id) || !strings.Contains(string(r.raw), mine.id) {
			t.Errorf("%s for a reader of acme/widgets: %s", path, r.raw)
		}
		if !strings.Contains(string(r.raw), `"blocking":2`) {
			t.Errorf("%s: the decision's counts lost: %s", path, r.raw)
		}
	}
	if r := h.do("GET", "/v1/drains", h.operator, nil).expect(t, 200, ""); !strings.Contains(string(r.raw), theirs.id) {
		t.Errorf("the operator's drains lack the other repo: %s", r.raw)
	}
}
