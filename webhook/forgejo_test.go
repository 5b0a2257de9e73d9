package webhook

// Head SHAs of the Forgejo 15.0.3 capture, in story order.
const (
	fMain1  = "f2635295d5c6bf6564d499a421e51eaeacb278b3" // initial push to main
	fAlpha1 = "5055f75c170457dbb3791a16aa59647c7b6f12c3" // feature/alpha created
	fAlpha2 = "fa5b3ee393ba29c428caecb66eea26aeb1a9db77" // fast-forward
	fAlpha3 = "f5d8efc9b5f1b483f0320da9c259c789e360126e" // force-push, then PR #1 opened
	fAlpha4 = "228c126eda929cf30405f2c7b3eec2ba4d8077b0" // push to the PR branch
	fAlpha5 = "e980d64dc8d3df57dfbdb36597b3794d7fe98eaa" // force-push (amend) of the PR branch
	fMain2  = "94e3c7af7e7f3449e3842ffb9aaf320bb108d52a" // PR #1 merged
	fBeta1  = "06356828bc1169c7e6c9d4b5cdce22252fd6db04" // feature/beta created
	fMain3  = "b612a967eae9c2cca91172a2b146bd7f5657f78c" // 25 commits on main
	fDelta1 = "8f9052f4127ff0c299b55a66aefbc5568f96a341" // feature/delta, PR #4
	fZeta1  = "3c4b1f3701ab86328a0a37afdfa2109c1011f54e" // feature/zeta, PR #6
)

// wantForgejo is what Parse must make of each file in testdata/forgejo:
// forgejo-type hooks (full refs in create/delete), gitea-type hooks (short
// refs) and a forgejo-type hook with the form content type.
var wantForgejo = map[string]Event{
	"01-create-branch.json":                                 ignored("create", reasonCreate),
	"02-create-branch-gitea-hook.json":                      ignored("create", reasonCreate),
	"03-push-initial.json":                                  push("main", zero40, fMain1),
	"04-push-initial-gitea-hook.json":                       push("main", zero40, fMain1),
	"05-create-branch.json":                                 ignored("create", reasonCreate),
	"06-create-branch-gitea-hook.json":                      ignored("create", reasonCreate),
	"07-push-new-branch.json":                               push("feature/alpha", zero40, fAlpha1),
	"08-push-new-branch-gitea-hook.json":                    push("feature/alpha", zero40, fAlpha1),
	"09-push-new-branch-form-hook.json":                     push("feature/alpha", zero40, fAlpha1),
	"10-push-fast-forward.json":                             push("feature/alpha", fAlpha1, fAlpha2),
	"11-push-fast-forward-gitea-hook.json":                  push("feature/alpha", fAlpha1, fAlpha2),
	"12-push-force.json":                                    push("feature/alpha", fAlpha2, fAlpha3),
	"13-push-force-gitea-hook.json":                         push("feature/alpha", fAlpha2, fAlpha3),
	"14-pull_request-opened.json":                           pr(1, "opened", fAlpha3, "feature/alpha", "feature/alpha", "main", false, false),
	"15-pull_request-opened-gitea-hook.json":                pr(1, "opened", fAlpha3, "feature/alpha", "feature/alpha", "main", false, false),
	"16-push-fast-forward.json":                             push("feature/alpha", fAlpha3, fAlpha4),
	"17-push-fast-forward-gitea-hook.json":                  push("feature/alpha", fAlpha3, fAlpha4),
	"18-pull_request-synchronized.json":                     pr(1, "synchronized", fAlpha4, "feature/alpha", "feature/alpha", "main", false, false),
	"19-pull_request-synchronized-gitea-hook.json":          pr(1, "synchronized", fAlpha4, "feature/alpha", "feature/alpha", "main", false, false),
	"20-push-force.json":                                    push("feature/alpha", fAlpha4, fAlpha5),
	"21-push-force-gitea-hook.json":                         push("feature/alpha", fAlpha4, fAlpha5),
	"22-pull_request-synchronized.json":                     pr(1, "synchronized", fAlpha5, "feature/alpha", "feature/alpha", "main", false, false),
	"23-pull_request-synchronized-gitea-hook.json":          pr(1, "synchronized", fAlpha5, "feature/alpha", "feature/alpha", "main", false, false),
	"24-pull_request-edited-title.json":                     pr(1, "edited", fAlpha5, "feature/alpha", "feature/alpha", "main", false, false),
	"25-pull_request-edited-title-gitea-hook.json":          pr(1, "edited", fAlpha5, "feature/alpha", "feature/alpha", "main", false, false),
	"26-pull_request-closed.json":                           pr(1, "closed", fAlpha5, "feature/alpha", "feature/alpha", "main", true, false),
	"27-pull_request-closed-gitea-hook.json":                pr(1, "closed", fAlpha5, "feature/alpha", "feature/alpha", "main", true, false),
	"28-pull_request-reopened.json":                         pr(1, "reopened", fAlpha5, "feature/alpha", "feature/alpha", "main", false, false),
	"29-pull_request-reopened-gitea-hook.json":              pr(1, "reopened", fAlpha5, "feature/alpha", "feature/alpha", "main", false, false),
	"30-pull_request-closed-merged.json":                    pr(1, "closed", fAlpha5, "feature/alpha", "feature/alpha", "main", true, true),
	"31-pull_request-closed-merged-gitea-hook.json":         pr(1, "closed", fAlpha5, "feature/alpha", "feature/alpha", "main", true, true),
	"32-push-merge-result.json":                             push("main", fMain1, fMain2),
	"33-push-merge-result-gitea-hook.json":                  push("main", fMain1, fMain2),
	"34-delete-branch.json":                                 deleted("feature/alpha"),
	"35-delete-branch-gitea-hook.json":                      deleted("feature/alpha"),
	"36-push-tag.json":                                      ignored("push", reasonTagPush),
	"37-push-tag-gitea-hook.json":                           ignored("push", reasonTagPush),
	"38-create-tag.json":                                    ignored("create", reasonCreate),
	"39-create-tag-gitea-hook.json":                         ignored("create", reasonCreate),
	"40-create-branch.json":                                 ignored("create", reasonCreate),
	"41-create-branch-gitea-hook.json":                      ignored("create", reasonCreate),
	"42-push-new-branch.json":                               push("feature/beta", zero40, fBeta1),
	"43-push-new-branch-gitea-hook.json":                    push("feature/beta", zero40, fBeta1),
	"44-push-tag-delete.json":                               ignored("push", reasonTagPush),
	"45-push-tag-delete-gitea-hook.json":                    ignored("push", reasonTagPush),
	"46-delete-tag.json":                                    ignored("delete", reasonTagDelete),
	"47-delete-tag-gitea-hook.json":                         ignored("delete", reasonTagDelete),
	"48-push-25-commits.json":                               push("main", fMain2, fMain3),
	"49-push-25-commits-gitea-hook.json":                    push("main", fMain2, fMain3),
	"50-push-test-delivery.json":                            ignored("push", reasonTestDelivery),
	"51-push-test-delivery-gitea-hook.json":                 ignored("push", reasonTestDelivery),
	"52-create-branch.json":                                 ignored("create", reasonCreate),
	"53-create-branch-gitea-hook.json":                      ignored("create", reasonCreate),
	"54-push-new-branch.json":                               push("feature/delta", zero40, fDelta1),
	"55-push-new-branch-gitea-hook.json":                    push("feature/delta", zero40, fDelta1),
	"56-pull_request-opened.json":                           pr(4, "opened", fDelta1, "feature/delta", "feature/delta", "main", false, false),
	"57-pull_request-opened-gitea-hook.json":                pr(4, "opened", fDelta1, "feature/delta", "feature/delta", "main", false, false),
	"58-pull_request-edited-base.json":                      pr(4, "edited", fDelta1, "feature/delta", "feature/delta", "release/1.x", false, false),
	"59-pull_request-edited-base-gitea-hook.json":           pr(4, "edited", fDelta1, "feature/delta", "feature/delta", "release/1.x", false, false),
	"60-push-tag.json":                                      ignored("push", reasonTagPush),
	"61-push-tag-gitea-hook.json":                           ignored("push", reasonTagPush),
	"62-create-tag.json":                                    ignored("create", reasonCreate),
	"63-create-tag-gitea-hook.json":                         ignored("create", reasonCreate),
	"64-delete-branch.json":                                 deleted("feature/delta"),
	"65-delete-branch-gitea-hook.json":                      deleted("feature/delta"),
	"66-pull_request-closed-branch-deleted.json":            pr(4, "closed", fDelta1, "refs/pull/4/head", "feature/delta", "main", true, false),
	"67-pull_request-closed-branch-deleted-gitea-hook.json": pr(4, "closed", fDelta1, "refs/pull/4/head", "feature/delta", "main", true, false),
	"68-create-branch.json":                                 ignored("create", reasonCreate),
	"69-create-branch-gitea-hook.json":                      ignored("create", reasonCreate),
	"70-create-branch-form-hook.json":                       ignored("create", reasonCreate),
	"71-push-new-branch.json":                               push("feature/zeta", zero40, fZeta1),
	"72-push-new-branch-gitea-hook.json":                    push("feature/zeta", zero40, fZeta1),
	"73-push-new-branch-form-hook.json":                     push("feature/zeta", zero40, fZeta1),
	"74-pull_request-opened.json":                           pr(6, "opened", fZeta1, "feature/zeta", "feature/zeta", "main", false, false),
	"75-pull_request-opened-gitea-hook.json":                pr(6, "opened", fZeta1, "feature/zeta", "feature/zeta", "main", false, false),
	"76-pull_request-opened-form-hook.json":                 pr(6, "opened", fZeta1, "feature/zeta", "feature/zeta", "main", false, false),
	"77-pull_request-closed.json":                           pr(6, "closed", fZeta1, "feature/zeta", "feature/zeta", "main", true, false),
	"78-pull_request-closed-gitea-hook.json":                pr(6, "closed", fZeta1, "feature/zeta", "feature/zeta", "main", true, false),
	"79-pull_request-closed-form-hook.json":                 pr(6, "closed", fZeta1, "feature/zeta", "feature/zeta", "main", true, false),
	"80-delete-branch.json":                                 deleted("feature/zeta"),
	"81-delete-branch-gitea-hook.json":                      deleted("feature/zeta"),
	"82-delete-branch-form-hook.json":                       deleted("feature/zeta"),
	"83-push-test-delivery-form-hook.json":                  ignored("push", reasonTestDelivery),
}
