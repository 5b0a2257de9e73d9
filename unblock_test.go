package checkpointd_test

import (
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
)

func TestHowToUnblock(t *testing.T) {
	yes, no := true, false
	seen := time.Date(2026, 3, 1, 7, 0, 0, 0, time.UTC)
	both := checkpointd.EvidenceSources{Webhooks: true, Forge: true}
	hooks := checkpointd.EvidenceSources{Webhooks: true}
	none := checkpointd.EvidenceSources{}
	r := func(rs ...checkpointd.BlockReason) []checkpointd.BlockReason { return rs }
	for _, tc := range []struct {
		name   string
		b      checkpointd.DrainBlocker
		ev     checkpointd.EvidenceSources
		want   checkpointd.UnblockAction
		detail string
	}{
		{"live run, nothing written", checkpointd.DrainBlocker{Reasons: r(checkpointd.BlockNoCheckpoint), Live: &yes}, both, checkpointd.UnblockWrite, "write a complete checkpoint"},
		{"stale", checkpointd.DrainBlocker{Reasons: r(checkpointd.BlockStale), Live: &yes}, both, checkpointd.UnblockWrite, "live head"},
		{"unresponsive run", checkpointd.DrainBlocker{SessionID: "ses_1", Reasons: r(checkpointd.BlockNoCheckpoint), Live: &no, LastSeenAt: &seen}, both, checkpointd.UnblockPark, "since 2026-03-01T07:00:00Z"},
		{"parked and incomplete", checkpointd.DrainBlocker{SessionID: "ses_1", Reasons: r(checkpointd.BlockIncomplete), Parked: true}, both, checkpointd.UnblockEnd, "sessions end ses_1"},
		{"parked, only unverified, a forge", checkpointd.DrainBlocker{Reasons: r(checkpointd.BlockUnverified), Parked: true}, both, checkpointd.UnblockWaitEvidence, "asks the forge"},
		{"only unverified, webhooks only", checkpointd.DrainBlocker{Reasons: r(checkpointd.BlockUnverified), Live: &yes}, hooks, checkpointd.UnblockWaitEvidence, "webhook delivery"},
		{"only unverified, no evidence", checkpointd.DrainBlocker{Reasons: r(checkpointd.BlockUnverified), Live: &yes}, none, checkpointd.UnblockConfigure, "--webhook-secret"},
		{"unverified and unwritten, no evidence", checkpointd.DrainBlocker{Reasons: r(checkpointd.BlockNoCheckpoint, checkpointd.BlockUnverified), Live: &yes}, none, checkpointd.UnblockWrite, "write"},
		{"invalidated before unresponsive", checkpointd.DrainBlocker{Reasons: r(checkpointd.BlockInvalidated), Live: &no}, both, checkpointd.UnblockEnd, "pull request or branch is gone"},
		{"unknown first", checkpointd.DrainBlocker{Reasons: r(checkpointd.BlockUnknown, checkpointd.BlockUnverified), Parked: true}, none, checkpointd.UnblockInvestigate, "checkpointd errors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkpointd.HowToUnblock(tc.b, tc.ev)
			if got.Action != tc.want || !strings.Contains(got.Detail, tc.detail) {
				t.Errorf("got %s %q, want %s containing %q", got.Action, got.Detail, tc.want, tc.detail)
			}
		})
	}
}
