package webhook

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	repoJSON = `"repository": {"id": 1, "full_name": "operator/demo", "name": "demo"}`
	shaA     = "2d180d0b5a6ae702d5efc399f36073d5952b6c59"
	shaB     = "beecf70ccd0f120ef28564c5882c3c35b9ce1408"
	sha256A  = "6f1ed002ab5595859014ebf0951522d9b7f5e7e2b4d3c5a8e9f0a1b2c3d4e5f6"
	sha256B  = "a3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2"
)

var zero64 = strings.Repeat("0", 64)

func pushJSON(ref, before, after string) string {
	return fmt.Sprintf(`{"ref": %q, "before": %q, "after": %q, "commits": [], %s}`, ref, before, after, repoJSON)
}

func deleteJSON(ref, refType string) string {
	return fmt.Sprintf(`{"ref": %q, "ref_type": %q, "pusher_type": "user", %s}`, ref, refType, repoJSON)
}

// prJSON builds a pull_request payload; pull is the pull_request object.
func prJSON(action string, number int, pull string) string {
	return fmt.Sprintf(`{"action": %q, "number": %d, "pull_request": %s, %s}`, action, number, pull, repoJSON)
}

func pullJSON(number int, merged bool, headSHA, headRef, headLabel, baseRef string) string {
	return fmt.Sprintf(`{"number": %d, "merged": %t, "state": "open", "head": {"label": %q, "ref": %q, "sha": %q, "repo_id": 1},
		"base": {"label": %q, "ref": %q, "sha": %q}}`, number, merged, headLabel, headRef, headSHA, baseRef, baseRef, shaA)
}

func TestParse(t *testing.T) {
	okPull := pullJSON(7, false, shaB, "feature/x", "feature/x", "main")
	tests := []struct {
		name, event, payload string
		want                 Event // nil: want ErrMalformed
	}{
		{"UI test delivery, zeros", "push", pushJSON("refs/heads/main", zero40, zero40), ignored("push", reasonTestDelivery)},
		{"API test delivery", "push", pushJSON("refs/heads/main", shaA, shaA), ignored("push", reasonTestDelivery)},
		{"test delivery, case differs", "push", pushJSON("refs/heads/main", shaA, strings.ToUpper(shaA)), ignored("push", reasonTestDelivery)},
		{"branch deleted by push", "push", pushJSON("refs/heads/a/b", shaA, zero40), deleted("a/b")},
		{"sha256 repository", "push", pushJSON("refs/heads/main", sha256A, sha256B), push("main", sha256A, sha256B)},
		{"sha256 branch deleted", "push", pushJSON("refs/heads/main", sha256A, zero64), deleted("main")},
		{"uppercase SHAs", "push", pushJSON("refs/heads/x", strings.ToUpper(shaA), strings.ToUpper(shaB)), push("x", shaA, shaB)},
		{"nested branch name", "push", pushJSON("refs/heads/a/b/c", shaA, shaB), push("a/b/c", shaA, shaB)},
		{"tag push", "push", pushJSON("refs/tags/v1", zero40, shaA), ignored("push", reasonTagPush)},
		{"tag deleted by push", "push", pushJSON("refs/tags/v1", shaA, zero40), ignored("push", reasonTagPush)},
		{"other ref", "push", pushJSON("refs/pull/1/head", shaA, shaB), ignored("push", reasonOtherRef)},
		{"short ref", "push", pushJSON("main", shaA, shaB), nil},
		{"empty branch", "push", pushJSON("refs/heads/", shaA, shaB), nil},
		{"control character in branch", "push", pushJSON("refs/heads/a\nb", shaA, shaB), nil},
		{"bad after", "push", pushJSON("refs/heads/x", shaA, "xyz"), nil},
		{"39-digit before", "push", pushJSON("refs/heads/x", shaA[1:], shaB), nil},
		{"mixed object formats", "push", pushJSON("refs/heads/x", shaA, sha256B), nil},
		{"missing repository", "push", fmt.Sprintf(`{"ref": "refs/heads/x", "before": %q, "after": %q}`, shaA, shaB), nil},
		{"null repository", "push", fmt.Sprintf(`{"ref": "refs/heads/x", "before": %q, "after": %q, "repository": null}`, shaA, shaB), nil},
		{"full_name without owner", "push", strings.Replace(pushJSON("refs/heads/x", shaA, shaB), "operator/demo", "demo", 1), nil},
		{"full_name with two slashes", "push", strings.Replace(pushJSON("refs/heads/x", shaA, shaB), "operator/demo", "a/b/c", 1), nil},
		{"not JSON", "push", `{"ref": "refs/heads/x",`, nil},
		{"JSON array", "push", `[]`, nil},
		{"wrong field type", "push", `{"ref": 1}`, nil},
		{"unknown fields ignored", "push", strings.Replace(pushJSON("refs/heads/x", shaA, shaB), `"commits"`, `"forced": true, "commits"`, 1), push("x", shaA, shaB)},

		{"delete, Gitea short ref", "delete", deleteJSON("feature/x", "branch"), deleted("feature/x")},
		{"delete, Forgejo full ref", "delete", deleteJSON("refs/heads/feature/x", "branch"), deleted("feature/x")},
		{"delete tag", "delete", deleteJSON("refs/tags/v1", "tag"), ignored("delete", reasonTagDelete)},
		{"delete, other ref_type", "delete", deleteJSON("x", "note"), ignored("delete", reasonOtherRefType)},
		{"delete without ref_type", "delete", deleteJSON("feature/x", ""), nil},
		{"delete without ref", "delete", deleteJSON("", "branch"), nil},
		{"delete of refs/heads/ alone", "delete", deleteJSON("refs/heads/", "branch"), nil},

		{"opened", "pull_request", prJSON("opened", 7, okPull), pr(7, "opened", shaB, "feature/x", "feature/x", "main", false, false)},
		{"synchronized", "pull_request_sync", prJSON("synchronized", 7, okPull), pr(7, "synchronized", shaB, "feature/x", "feature/x", "main", false, false)},
		{"closed merged", "pull_request", prJSON("closed", 7, pullJSON(7, true, shaB, "feature/x", "feature/x", "main")), pr(7, "closed", shaB, "feature/x", "feature/x", "main", true, true)},
		{"AGit PR without label", "pull_request", prJSON("opened", 7, pullJSON(7, false, shaB, "refs/pull/7/head", "", "main")), pr(7, "opened", shaB, "refs/pull/7/head", "", "main", false, false)},
		{"uppercase head SHA", "pull_request", prJSON("edited", 7, pullJSON(7, false, strings.ToUpper(shaB), "x", "x", "main")), pr(7, "edited", shaB, "x", "x", "main", false, false)},
		{"null pull_request", "pull_request", prJSON("opened", 7, "null"), ignored("pull_request", reasonNullPR)},
		{"labeled, junk pull_request", "pull_request_label", prJSON("label_updated", 0, `{"head": {}}`), ignored("pull_request_label", reasonAction)},
		{"reviewed", "pull_request_review_approved", prJSON("reviewed", 7, okPull), ignored("pull_request_review_approved", reasonAction)},
		{"assigned", "pull_request_assign", prJSON("assigned", 7, okPull), ignored("pull_request_assign", reasonAction)},
		{"deleted while open (Gitea)", "pull_request", prJSON("deleted", 7, okPull), pr(7, "deleted", shaB, "feature/x", "feature/x", "main", true, false)},
		{"PR comment edited", "pull_request_comment", `{"action": "edited", "is_pull": true}`, ignored("pull_request_comment", reasonComment)},
		{"number zero", "pull_request", prJSON("opened", 0, okPull), nil},
		{"numbers differ", "pull_request", prJSON("opened", 8, okPull), nil},
		{"zero head SHA", "pull_request", prJSON("opened", 7, pullJSON(7, false, zero40, "x", "x", "main")), nil},
		{"no head SHA", "pull_request", prJSON("opened", 7, pullJSON(7, false, "", "x", "x", "main")), nil},
		{"no head ref", "pull_request", prJSON("opened", 7, pullJSON(7, false, shaB, "", "x", "main")), nil},
		{"no base ref", "pull_request", prJSON("opened", 7, pullJSON(7, false, shaB, "x", "x", "")), nil},
		{"PR without repository", "pull_request", fmt.Sprintf(`{"action": "opened", "number": 7, "pull_request": %s}`, okPull), nil},
		{"PR not JSON", "pull_request", `nope`, nil},

		{"create", "create", `not even JSON`, ignored("create", reasonCreate)},
		{"issues", "issues", `{}`, ignored("issues", reasonUnhandled)},
		{"coarse review event", "pull_request_rejected", prJSON("reviewed", 7, okPull), ignored("pull_request_rejected", reasonAction)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(&Delivery{ID: "x", Event: tt.event, Forge: "gitea", Payload: []byte(tt.payload)})
			if tt.want == nil {
				if !errors.Is(err, ErrMalformed) || got != nil {
					t.Fatalf("Parse = %#v, %v; want ErrMalformed", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIsZeroSHA(t *testing.T) {
	for s, want := range map[string]bool{
		zero40: true, zero64: true, "": false, "0": false, zero40[1:]: false,
		zero40 + "0": false, shaA: false, "000000000000000000000000000000000000000a": false,
	} {
		if got := IsZeroSHA(s); got != want {
			t.Errorf("IsZeroSHA(%q) = %t, want %t", s, got, want)
		}
	}
}
