package redact

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRedactProse: a secret name, a link word and a value that looks like
// a credential. Ordinary English about secrets survives.
func TestRedactProse(t *testing.T) {
	checkCases(t, []redactCase{
		{"the staging db password: Sup3rS3cretX (rotate)", "the staging db password: [REDACTED:secret_field] (rotate)"},
		{"the admin password is Sup3rS3cretX.", "the admin password is [REDACTED:secret_field]."},
		{"the password is now Sup3rS3cretX", "the password is now [REDACTED:secret_field]"},
		{"the root password was reset to Sup3rS3cretX by ops", "the root password was reset to [REDACTED:secret_field] by ops"},
		{"changed the password to 'Sup3r S3cret'", "changed the password to '[REDACTED:secret_field]'"},
		{"the API key is k3y-Ab12Cd34", "the API key is [REDACTED:secret_field]"},
		{"the password is 12345678", "the password is [REDACTED:secret_field]"},
		{"set GITEA_TOKEN to " + testHex40, "set GITEA_TOKEN to [REDACTED:gitea_token]"},
		{"GITEA_TOKEN is " + testHex40 + ".", "GITEA_TOKEN is [REDACTED:gitea_token]."},
		{"GITEA_TOKEN " + testHex40, "GITEA_TOKEN [REDACTED:gitea_token]"},
		{"the Forgejo token is " + testHex40, "the Forgejo token is [REDACTED:gitea_token]"},
		{"my access token: " + testHex40, "my access token: [REDACTED:gitea_token]"},
		{"giteaToken was " + testHex40, "giteaToken was [REDACTED:gitea_token]"},
		{"the token is " + testGHP, "the token is [REDACTED:github_token]"},
		{"aws configure set aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
			"aws configure set aws_secret_access_key [REDACTED:aws_secret_access_key]"},
		{"DB_PASSWORD\tSup3rS3cretX", "DB_PASSWORD\t[REDACTED:secret_field]"},
		// Kept: no credential-looking word, a SHA after an unqualified name,
		// a location, a code reference, a variable.
		{"the password reset flow is broken", "the password reset flow is broken"},
		{"the password is required", "the password is required"},
		{"the password was reset on 2026-03-01", "the password was reset on 2026-03-01"},
		{"the token is valid for 3600 seconds", "the token is valid for 3600 seconds"},
		{"the token: it expired", "the token: it expired"},
		{"the commit that rotated the token: " + testSHA1, "the commit that rotated the token: " + testSHA1},
		{"the fix for the leaked token is " + testSHA1, "the fix for the leaked token is " + testSHA1},
		{"the fix for the password is a4c123b", "the fix for the password is a4c123b"},
		{"copy the secret to /run/secrets/db2", "copy the secret to /run/secrets/db2"},
		{"post the token to https://ci.example.com/v2/hook", "post the token to https://ci.example.com/v2/hook"},
		{"the password is cfg.DBPassword", "the password is cfg.DBPassword"},
		{"$GITEA_TOKEN is " + testHex40, "$GITEA_TOKEN is " + testHex40},
		{"the fencing_token is 12345678", "the fencing_token is 12345678"},
		{"max_tokens 40960000", "max_tokens 40960000"},
		{"unset AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN", "unset AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN"},
		{"GITEA_TOKEN=$GITEA_TOKEN GITEA_TOKEN is ${GITEA_TOKEN}", "GITEA_TOKEN=$GITEA_TOKEN GITEA_TOKEN is ${GITEA_TOKEN}"},
	})
}

// TestRedactSHAContexts puts commit SHAs (one shaped exactly like a Gitea
// token) wherever a checkpoint or a pasted log shows them: none may go.
func TestRedactSHAContexts(t *testing.T) {
	for _, sha := range []string{testSHA1, testHex40, strings.ToUpper(testSHA1), testSHA256, testSHA1[:7], testSHA1[:12]} {
		for _, ctx := range []string{
			"%s", "commit %s", "commit: %s", "head %s", "head: %s", "HEAD is now at %s fix: guard Render",
			"git checkout %s", "git reset --hard %s", "git cherry-pick %s", "git revert --no-edit %s",
			"sha: %s", "sha=%s", "SHA %s", "the sha is %s", "the head is %s", "base was %s",
			"the commit that rotated the token: %s", "the fix for the leaked password is %s",
			"the token refresh landed in %s", "token fix is %s", "secret rotation commit %s",
			"secret_rotation_commit %s", "the password change was %s", "reverted the secret leak in %s",
			"Merge: %s %s", "parent %s", "tree %s", "pushed %s to fix-12", "evidence ref commit:%s",
			`{"head": "%s"}`, `{"sha": "%s", "before": "%s", "after": "%s"}`, `{"head_commit": {"id": "%s"}}`,
			"https://git.example.com/o/r/commit/%s", "?sha=%s&ref=main", "%%3Fsha%%3D%s%%26ref%%3Dmain",
			"- %s fix: token refresh", "  * %s (HEAD -> fix-12) password reset flow",
		} {
			in := strings.ReplaceAll(ctx, "%s", sha)
			in = strings.ReplaceAll(in, "%%", "%")
			if got, n, err := String(in); err != nil || n != 0 || got != in {
				t.Errorf("String(%q) = %q, %d, %v", in, got, n, err)
			}
		}
		tree := map[string]any{
			"workspace": map[string]any{"head": sha, "base": sha},
			"evidence":  []any{map[string]any{"kind": "git.commit", "ref": sha, "summary": "commit " + sha}},
			"note":      "head " + sha + ", sha: " + sha + ", the token is fixed in " + sha,
		}
		var before any
		b, _ := json.Marshal(tree)
		_ = json.Unmarshal(b, &before)
		out, n, err := Tree(before)
		if err != nil || n != 0 {
			t.Errorf("Tree with %s: %d redactions, %v", sha, n, err)
		}
		if diff := cmp.Diff(before, out); diff != "" {
			t.Errorf("Tree with %s changed (-in +out):\n%s", sha, diff)
		}
	}
}
