package webhook

// Head SHAs of the Gitea 1.25.4 capture, in story order.
const (
	gMain1  = "1f803be6a701b09672f9bfecd02c35d9a1e1cc3d" // initial push to main
	gAlpha1 = "2d180d0b5a6ae702d5efc399f36073d5952b6c59" // feature/alpha created
	gAlpha2 = "beecf70ccd0f120ef28564c5882c3c35b9ce1408" // fast-forward
	gAlpha3 = "8c7cc07de608f0199412420c337fc86ce21b58c5" // force-push, then PR #1 opened
	gAlpha4 = "e966c58504d813c37bf6ace4e3809c3cbb23211e" // push to the PR branch
	gMain2  = "e1e7498dc64dd95985f3f815723df4fc41f40cc5" // PR #1 merged
	gBeta1  = "92d74c43f6f652b8061985e4bfe7e6cce96f1d98" // feature/beta created
	gMain3  = "35a26f1565c1d93c0cddae352d1b36b273ad71d6" // 25 commits on main
	gDelta1 = "b08a322da7c52f58e8f670ebb712597f7b62324c" // feature/delta, PR #4
	gProbe1 = "b46cf7014be09d4783a292014b76523b3ca67c41" // probe-open-delete, PR #8 (a later capture)
)

// wantGitea is what Parse must make of each file in testdata/gitea; the
// gogs-hook files carry the same bodies as the gitea-hook ones.
var wantGitea = map[string]Event{
	"01-create-branch.json":                      ignored("create", reasonCreate),
	"02-create-branch-gogs-hook.json":            ignored("create", reasonCreate),
	"03-push-initial.json":                       push("main", zero40, gMain1),
	"04-push-initial-gogs-hook.json":             push("main", zero40, gMain1),
	"05-create-branch.json":                      ignored("create", reasonCreate),
	"06-create-branch-gogs-hook.json":            ignored("create", reasonCreate),
	"07-push-new-branch.json":                    push("feature/alpha", zero40, gAlpha1),
	"08-push-new-branch-gogs-hook.json":          push("feature/alpha", zero40, gAlpha1),
	"09-push-fast-forward.json":                  push("feature/alpha", gAlpha1, gAlpha2),
	"10-push-fast-forward-gogs-hook.json":        push("feature/alpha", gAlpha1, gAlpha2),
	"11-push-force.json":                         push("feature/alpha", gAlpha2, gAlpha3),
	"12-push-force-gogs-hook.json":               push("feature/alpha", gAlpha2, gAlpha3),
	"13-pull_request-opened.json":                pr(1, "opened", gAlpha3, "feature/alpha", "feature/alpha", "main", false, false),
	"14-pull_request-opened-gogs-hook.json":      pr(1, "opened", gAlpha3, "feature/alpha", "feature/alpha", "main", false, false),
	"15-push-fast-forward.json":                  push("feature/alpha", gAlpha3, gAlpha4),
	"16-pull_request-synchronized.json":          pr(1, "synchronized", gAlpha4, "feature/alpha", "feature/alpha", "main", false, false),
	"17-pull_request-edited-title.json":          pr(1, "edited", gAlpha4, "feature/alpha", "feature/alpha", "main", false, false),
	"18-pull_request-closed.json":                pr(1, "closed", gAlpha4, "feature/alpha", "feature/alpha", "main", true, false),
	"19-pull_request-reopened.json":              pr(1, "reopened", gAlpha4, "feature/alpha", "feature/alpha", "main", false, false),
	"20-pull_request-closed-merged.json":         pr(1, "closed", gAlpha4, "feature/alpha", "feature/alpha", "main", true, true),
	"21-push-merge-result.json":                  push("main", gMain1, gMain2),
	"22-delete-branch.json":                      deleted("feature/alpha"),
	"23-push-tag.json":                           ignored("push", reasonTagPush),
	"24-create-tag.json":                         ignored("create", reasonCreate),
	"25-create-branch.json":                      ignored("create", reasonCreate),
	"26-push-new-branch.json":                    push("release/1.x", zero40, gMain2),
	"27-create-branch.json":                      ignored("create", reasonCreate),
	"28-push-new-branch.json":                    push("feature/beta", zero40, gBeta1),
	"29-push-25-commits.json":                    push("main", gMain2, gMain3),
	"30-push-test-delivery.json":                 ignored("push", reasonTestDelivery),
	"31-create-branch.json":                      ignored("create", reasonCreate),
	"32-push-new-branch.json":                    push("feature/delta", zero40, gDelta1),
	"33-pull_request-opened.json":                pr(4, "opened", gDelta1, "feature/delta", "feature/delta", "main", false, false),
	"34-pull_request-edited-base.json":           pr(4, "edited", gDelta1, "feature/delta", "feature/delta", "release/1.x", false, false),
	"35-push-tag.json":                           ignored("push", reasonTagPush),
	"36-create-tag.json":                         ignored("create", reasonCreate),
	"37-push-tag-delete.json":                    ignored("push", reasonTagPush),
	"38-delete-tag.json":                         ignored("delete", reasonTagDelete),
	"39-delete-branch.json":                      deleted("feature/delta"),
	"40-pull_request-closed-branch-deleted.json": pr(4, "closed", gDelta1, "refs/pull/4/head", "feature/delta", "main", true, false),
	// The sync was built with the head the PR already had; the deletion
	// still says "state": "open" and ends the PR all the same.
	"41-pull_request-opened-pr8.json":       pr(8, "opened", gProbe1, "probe-open-delete", "probe-open-delete", "main", false, false),
	"42-pull_request-synchronized-pr8.json": pr(8, "synchronized", gProbe1, "probe-open-delete", "probe-open-delete", "main", false, false),
	"43-pull_request-deleted-open-pr8.json": pr(8, "deleted", gProbe1, "probe-open-delete", "probe-open-delete", "main", true, false),
}
