package redact

import "testing"

// TestRedactPercentEncoded: a URL pasted as a query value keeps its
// user-info and query secrets encoded; every case of the hex digits counts.
func TestRedactPercentEncoded(t *testing.T) {
	var cases []redactCase
	for _, enc := range []struct{ colon, slash, at, eq, amp, q string }{
		{"%3A", "%2F", "%40", "%3D", "%26", "%3F"},
		{"%3a", "%2f", "%40", "%3d", "%26", "%3f"},
		{"%3A", "%2f", "%40", "%3d", "%26", "%3F"},
		{"%3a", "%2F", "%40", "%3D", "%26", "%3f"},
	} {
		url := func(pw string) string {
			return "next=https" + enc.colon + enc.slash + enc.slash + "bob" + enc.colon + pw + enc.at + "git.example.com" + enc.slash + "o" + enc.slash + "r.git&x=1"
		}
		query := func(tok string) string {
			return "r=" + enc.slash + "cb" + enc.q + "code" + enc.eq + "1" + enc.amp + "access_token" + enc.eq + tok + enc.amp + "token" + enc.eq + tok + "&y=2"
		}
		cases = append(cases,
			redactCase{url("Sup3rS3cret"), url("[REDACTED:url_userinfo]")},
			redactCase{url(testHex40), url("[REDACTED:gitea_token]")},
			redactCase{query("abc123def"), query("[REDACTED:query_secret]")},
			redactCase{query(testHex40), query("[REDACTED:gitea_token]")},
			redactCase{"q" + enc.q + "key" + enc.eq + "k3y" + enc.amp + "a" + enc.eq + "b", "q" + enc.q + "key" + enc.eq + "[REDACTED:query_secret]" + enc.amp + "a" + enc.eq + "b"},
		)
	}
	cases = append(cases,
		redactCase{"https%3A//deploy%3Apa55w0rd%40git.example.com/o/r", "https%3A//deploy%3A[REDACTED:url_userinfo]%40git.example.com/o/r"},
		redactCase{"ssh%3A%2F%2F" + testGHP + "%40github.com", "ssh%3A%2F%2F[REDACTED:github_token]%40github.com"},
		redactCase{"body: user%3Dagent%26password%3Dhunter2%23top", "body: user%3Dagent%26password%3D[REDACTED:query_secret]%23top"},
		// Encoded text without a secret.
		redactCase{"https%3A%2F%2Fgit%40git.example.com%2Fo%2Fr.git", "https%3A%2F%2Fgit%40git.example.com%2Fo%2Fr.git"},
		redactCase{"next=https%3A%2F%2Fh.example%2Fcb&email=a%40b.example", "next=https%3A%2F%2Fh.example%2Fcb&email=a%40b.example"},
		redactCase{"%3Fsha%3D" + testSHA1 + "%26fencing_token%3D7%26page_token%3Dabc123", "%3Fsha%3D" + testSHA1 + "%26fencing_token%3D7%26page_token%3Dabc123"},
		redactCase{"%3Fkey%3D%26token%3D%26x", "%3Fkey%3D%26token%3D%26x"},
	)
	checkCases(t, cases)
}
