package checkpointd

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestDrainBlockers: the blocking rule over what the row says, relative to
// the drain's start; anything that makes no sense blocks as unknown.
func TestDrainBlockers(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	before, after := start.Add(-time.Minute), start.Add(time.Minute)
	ready := Readiness{DrainStart: start, Ready: true, CheckpointAt: after, Complete: true, Missing: []string{}, Validity: ValidityValid}
	with := func(f func(*Readiness)) Readiness { r := ready; f(&r); return r }
	cases := []struct {
		name string
		in   Readiness
		want []BlockReason
	}{
		{"ready", ready, nil},
		{"no checkpoint at all", with(func(r *Readiness) { r.Ready, r.CheckpointAt, r.Complete = false, time.Time{}, false }),
			[]BlockReason{BlockNoCheckpoint}},
		{"checkpoint from before the drain", with(func(r *Readiness) { r.Ready, r.CheckpointAt = false, before }),
			[]BlockReason{BlockNoCheckpoint}},
		{"reset by the drain after a write timed after its start", with(func(r *Readiness) { r.Ready = false }),
			[]BlockReason{BlockNoCheckpoint}},
		{"incomplete since the drain", with(func(r *Readiness) { r.Ready, r.Complete, r.Missing = false, false, []string{"next_action"} }),
			[]BlockReason{BlockIncomplete}},
		{"incomplete from before the drain", with(func(r *Readiness) {
			r.Ready, r.Complete, r.CheckpointAt, r.Missing = false, false, before, []string{"next_action"}
		}), []BlockReason{BlockNoCheckpoint, BlockIncomplete}},
		{"parked with a complete checkpoint from before the drain", with(func(r *Readiness) { r.Parked, r.CheckpointAt = true, before }), nil},
		{"parked, incomplete from before the drain", with(func(r *Readiness) {
			r.Parked, r.Ready, r.Complete, r.CheckpointAt, r.Missing = true, false, false, before, []string{"next_action"}
		}), []BlockReason{BlockIncomplete}},
		{"parked, stale", with(func(r *Readiness) { r.Parked, r.Validity = true, ValidityStale }), []BlockReason{BlockStale}},
		{"parked after a failed write", with(func(r *Readiness) { r.Parked, r.WriteFailedAt = true, after }), nil},
		{"parked without any checkpoint", with(func(r *Readiness) {
			r.Parked, r.Ready, r.CheckpointAt, r.Complete, r.Validity = true, false, time.Time{}, false, ValidityUnverified
		}), []BlockReason{BlockUnverified}},
		{"parked, not ready although complete and valid", with(func(r *Readiness) { r.Parked, r.Ready = true, false }),
			[]BlockReason{BlockUnknown}},
		{"stale", with(func(r *Readiness) { r.Validity = ValidityStale }), []BlockReason{BlockStale}},
		{"lease lost", with(func(r *Readiness) { r.Validity = ValidityLeaseLost }), []BlockReason{BlockLeaseLost}},
		{"invalidated", with(func(r *Readiness) { r.Validity = ValidityInvalidated }), []BlockReason{BlockInvalidated}},
		{"unverified", with(func(r *Readiness) { r.Validity = ValidityUnverified }), []BlockReason{BlockUnverified}},
		{"write failed since the drain", with(func(r *Readiness) { r.Ready, r.WriteFailedAt = false, after }),
			[]BlockReason{BlockWriteFailed}},
		{"write failed before the drain, nothing since", with(func(r *Readiness) { r.Ready, r.CheckpointAt, r.WriteFailedAt = false, before, before }),
			[]BlockReason{BlockNoCheckpoint}},
		{"unknown validity", with(func(r *Readiness) { r.Validity = "bogus" }), []BlockReason{BlockUnknown}},
		{"unreadable missing rules", with(func(r *Readiness) { r.Ready, r.Complete, r.Missing = false, false, nil }),
			[]BlockReason{BlockIncomplete, BlockUnknown}},
		{"latest checkpoint unreadable", with(func(r *Readiness) { r.Ready, r.Unreadable = false, true }), []BlockReason{BlockUnknown}},
		{"latest checkpoint unreadable, from before the drain", with(func(r *Readiness) { r.Ready, r.Unreadable, r.CheckpointAt = false, true, before }),
			[]BlockReason{BlockNoCheckpoint, BlockUnknown}},
		{"latest checkpoint unreadable yet ready", with(func(r *Readiness) { r.Unreadable = true }), []BlockReason{BlockUnknown}},
		{"ready yet incomplete", with(func(r *Readiness) { r.Complete = false }), []BlockReason{BlockIncomplete}},
		{"ready yet no checkpoint", with(func(r *Readiness) { r.CheckpointAt = time.Time{} }), []BlockReason{BlockNoCheckpoint}},
		{"many at once", with(func(r *Readiness) {
			r.Ready, r.Complete, r.Missing, r.Validity, r.WriteFailedAt = false, false, []string{"workspace.head"}, ValidityStale, after
		}), []BlockReason{BlockIncomplete, BlockStale, BlockWriteFailed}},
	}
	for _, c := range cases {
		if diff := cmp.Diff(c.want, DrainBlockers(c.in)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}
