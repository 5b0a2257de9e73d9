package redact

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Fake secrets for the tables; random, never real credentials.
const (
	testHex40  = "3f1c9d2e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e"
	testSHA1   = "9fceb02d0ae598e95dc970b74767f19372d61af8"
	testSHA256 = "b1946ac92492d2347c6235b4d2611184b1946ac92492d2347c6235b4d2611184"
	testGHP    = "ghp_R8kT2mQ9vX4bN7cW1zL5pH3jF6gD0sA8eY2u"
	testJWT    = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ2VudC03In0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"
)

func TestRedactStringKinds(t *testing.T) {
	tests := []struct {
		name, in, want string
		n              int
	}{
		// authorization: the scheme stays, the credential goes.
		{"auth token header", `curl -H "Authorization: token s3cr3tT0ken99" https://git.example.com`,
			`curl -H "Authorization: token [REDACTED:authorization]" https://git.example.com`, 1},
		{"auth bearer line", "Authorization: Bearer Zm9vYmFyMTIzNDU2",
			"Authorization: Bearer [REDACTED:authorization]", 1},
		{"auth basic", "Proxy-Authorization: Basic YWdlbnQ6aHVudGVyMg==",
			"Proxy-Authorization: Basic [REDACTED:authorization]", 1},
		{"auth json", `{"Authorization": "Bearer abc123def456"}`,
			`{"Authorization": "Bearer [REDACTED:authorization]"}`, 1},
		{"auth without scheme", "authorization: a1b2c3d4e5f6g7h8",
			"authorization: [REDACTED:authorization]", 1},
		{"auth prose word survives", "missing authorization: the server said 401", "missing authorization: the server said 401", 0},
		// bearer anywhere
		{"bare bearer", "retried with Bearer k9Xw2Lq8Zt4v after 401", "retried with Bearer [REDACTED:bearer] after 401", 1},
		{"bearer at sentence end", "it used bearer Qm9vYmFyMTIz.", "it used bearer [REDACTED:bearer].", 1},
		{"bearer prose", "Bearer tokens expire after one hour", "Bearer tokens expire after one hour", 0},
		{"bearer as a value", "token_type=bearer expires_in=3600", "token_type=bearer expires_in=3600", 0},
		// url_userinfo: scheme, user and host stay
		{"url password", "git clone https://agent:pa55w0rd@git.example.com/o/r.git",
			"git clone https://agent:[REDACTED:url_userinfo]@git.example.com/o/r.git", 1},
		{"url empty user", "redis://:hunter2@cache:6379/0", "redis://:[REDACTED:url_userinfo]@cache:6379/0", 1},
		{"url user only", "ssh://git@git.example.com/o/r.git", "ssh://git@git.example.com/o/r.git", 0},
		{"scp style", "git@git.example.com:o/r.git", "git@git.example.com:o/r.git", 0},
		{"url token as user", "https://" + testHex40 + "@git.example.com/o/r.git",
			"https://[REDACTED:gitea_token]@git.example.com/o/r.git", 1},
		{"url at in path", "https://git.example.com/o/r/blame/main?email=a@b.example", "https://git.example.com/o/r/blame/main?email=a@b.example", 0},
		// query_secret: '=' assignments in URLs, forms, env and flags
		{"query", "https://x.example/cb?code=1&access_token=abc123&state=x",
			"https://x.example/cb?code=1&access_token=[REDACTED:query_secret]&state=x", 1},
		{"query key only in query", "https://maps.example/api?key=AIzaSyA1b2&q=x",
			"https://maps.example/api?key=[REDACTED:query_secret]&q=x", 1},
		{"key= outside a query", "sort key=name", "sort key=name", 0},
		{"env", "export DB_PASSWORD=hunter2", "export DB_PASSWORD=[REDACTED:query_secret]", 1},
		{"env quoted", `PGPASSWORD="hunter 2" psql`, `PGPASSWORD="[REDACTED:query_secret]" psql`, 1},
		{"ini spaced", "client_secret = abcdef123456", "client_secret = [REDACTED:query_secret]", 1},
		{"flag equals", "--client-secret=abc123", "--client-secret=[REDACTED:query_secret]", 1},
		{"flag space", "docker login -u a --password hunter2 reg.example", "docker login -u a --password [REDACTED:query_secret] reg.example", 1},
		{"flag followed by flag", "mysql --password --user=a", "mysql --password --user=a", 0},
		// secret_field: ':' structure and map keys
		{"json", `{"user": "a", "password": "hunter2"}`, `{"user": "a", "password": "[REDACTED:secret_field]"}`, 1},
		{"json number", `{"pin_password": 1234, "x": 1}`, `{"pin_password": [REDACTED:secret_field], "x": 1}`, 1},
		{"json nested block", `{"credentials": {"user": "a", "pass": "b"}, "host": "h"}`,
			`{"credentials": [REDACTED:secret_field], "host": "h"}`, 1},
		{"escaped json", `body "{\"password\": \"hunter2\"}"`, `body "{\"password\": \"[REDACTED:secret_field]\"}"`, 1},
		{"yaml", "db:\n  password: correct horse battery\n  host: db", "db:\n  password: [REDACTED:secret_field]\n  host: db", 1},
		{"yaml list", "- api_key: abc123", "- api_key: [REDACTED:secret_field]", 1},
		{"camel case inline", "config had apiKey: k-123456 set", "config had apiKey: [REDACTED:secret_field] set", 1},
		{"header", `-H "X-Api-Key: k123456"`, `-H "X-Api-Key: [REDACTED:secret_field]"`, 1},
		{"prose colon", "rotate the token: it expired", "rotate the token: it expired", 0},
		{"go assignment", `token := os.Getenv("GITEA_TOKEN")`, `token := os.Getenv("GITEA_TOKEN")`, 0},
		{"comparison", `if token == "" {`, `if token == "" {`, 0},
		// pem_private_key
		{"pem", "key:\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\n-----END EC PRIVATE KEY-----\nok",
			"key:\n[REDACTED:pem_private_key]\nok", 1},
		{"pem truncated", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA", "[REDACTED:pem_private_key]", 1},
		{"certificate survives", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", 0},
		// shapes
		{"jwt", "cookie jar had " + testJWT + " in it", "cookie jar had [REDACTED:jwt] in it", 1},
		{"github", "token " + testGHP + ".", "token [REDACTED:github_token].", 1},
		{"github pat", "github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTU",
			"[REDACTED:github_token]", 1},
		{"gitlab", "glpat-Xy3_kP9qR2sT5vW8zA1b", "[REDACTED:gitlab_token]", 1},
		{"openai", "sk-proj-Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE", "[REDACTED:openai_key]", 1},
		{"openai legacy", "sk-Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE5fG7", "[REDACTED:openai_key]", 1},
		{"anthropic", "sk-ant-api03-Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9b-C1dE", "[REDACTED:anthropic_key]", 1},
		{"sk kebab survives", "task-sk-refactor-login-page-and-session", "task-sk-refactor-login-page-and-session", 0},
		{"slack", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "[REDACTED:slack_token]", 1},
		{"slack app", "xapp-1-A0123ABCDEF-1234567890123-abcdef0123456789", "[REDACTED:slack_token]", 1},
		{"aws key id", "id AKIAIOSFODNN7EXAMPLE,", "id [REDACTED:aws_access_key_id],", 1},
		{"aws secret", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
			"aws_secret_access_key = [REDACTED:aws_secret_access_key]", 1},
		{"checkpointd token", "cpd_Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWo", "[REDACTED:checkpointd_token]", 1},
		// gitea_token: 40 hex only by context
		{"gitea header", "Authorization: token " + testHex40, "Authorization: token [REDACTED:gitea_token]", 1},
		{"gitea env", "FORGEJO_TOKEN=" + testHex40, "FORGEJO_TOKEN=[REDACTED:gitea_token]", 1},
		{"gitea json", `{"token": "` + testHex40 + `"}`, `{"token": "[REDACTED:gitea_token]"}`, 1},
		{"gitea url", "https://agent:" + testHex40 + "@git.example.com", "https://agent:[REDACTED:gitea_token]@git.example.com", 1},
		{"hex under password is a password", "password=" + testHex40, "password=[REDACTED:query_secret]", 1},
		// cookie
		{"cookie", "Cookie: i_like_gitea=abc123; lang=en", "Cookie: [REDACTED:cookie]", 1},
		{"set-cookie", "Set-Cookie: sid=abc; Path=/; HttpOnly\nX: y", "Set-Cookie: [REDACTED:cookie]\nX: y", 1},
		// SHAs survive in every context that is not a token slot
		{"sha bare", testSHA1, testSHA1, 0},
		{"sha256 bare", testSHA256, testSHA256, 0},
		{"sha checkout", "git checkout " + testSHA1, "git checkout " + testSHA1, 0},
		{"sha yaml", "head: " + testSHA1, "head: " + testSHA1, 0},
		{"sha url", "https://git.example.com/o/r/commit/" + testSHA1, "https://git.example.com/o/r/commit/" + testSHA1, 0},
		{"sha ref", "sha=" + testSHA1 + "&ref=main", "sha=" + testSHA1 + "&ref=main", 0},
		// safe keys
		{"fencing token", `{"fencing_token": 7, "fencingToken": 8} fencing_token=9`, `{"fencing_token": 7, "fencingToken": 8} fencing_token=9`, 0},
		{"idempotency key", "Idempotency-Key: ckpt-34 idempotency_key=ckpt-35", "Idempotency-Key: ckpt-34 idempotency_key=ckpt-35", 0},
		{"safe suffix", "password_file=/run/secrets/db token_url=https://a.example/t", "password_file=/run/secrets/db token_url=https://a.example/t", 0},
		// placeholders are instructions, not secrets
		{"placeholders", `GITEA_TOKEN=$GITEA_TOKEN password: ${{ secrets.PW }} token=<token> {"secret": null}`,
			`GITEA_TOKEN=$GITEA_TOKEN password: ${{ secrets.PW }} token=<token> {"secret": null}`, 0},
		// several in one string, counted one by one
		{"several", "export GITEA_TOKEN=" + testHex40 + " && git push https://a:b1@h.example/o/r " + testGHP,
			"export GITEA_TOKEN=[REDACTED:gitea_token] && git push https://a:[REDACTED:url_userinfo]@h.example/o/r [REDACTED:github_token]", 3},
		{"empty", "", "", 0},
		{"unicode around", "pässwörd — password=geheim✓ ok", "pässwörd — password=[REDACTED:query_secret] ok", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, n, err := String(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" || n != tt.n {
				t.Errorf("String(%q): n = %d, want %d; -want +got:\n%s", tt.in, n, tt.n, diff)
			}
			again, n2, err := String(got)
			if err != nil || again != got || n2 != 0 {
				t.Errorf("second pass: %q, %d, %v", again, n2, err)
			}
		})
	}
}

// redactCase is one String input and what it must become.
type redactCase struct{ in, want string }

func checkCases(t *testing.T, cases []redactCase) {
	t.Helper()
	for _, c := range cases {
		got, n, err := String(c.in)
		if err != nil {
			t.Fatalf("String(%q): %v", c.in, err)
		}
		wantN := strings.Count(c.want, markerPrefix) - strings.Count(c.in, markerPrefix)
		if got != c.want || n != wantN {
			t.Errorf("String(%q)\n got %q (%d)\nwant %q (%d)", c.in, got, n, c.want, wantN)
		}
		if again, n2, _ := String(got); again != got || n2 != 0 {
			t.Errorf("second pass on %q: %q (%d)", got, again, n2)
		}
	}
}

func TestRedactStringIdempotentMarkers(t *testing.T) {
	for _, in := range []string{
		"[REDACTED:github_token]",
		"password: [REDACTED:secret_field]",
		"Authorization: Bearer [REDACTED:authorization]",
		"https://agent:[REDACTED:url_userinfo]@git.example.com",
		"https://[REDACTED:gitea_token]@git.example.com",
		`{"credentials": [REDACTED:secret_field], "x": 1}`,
		"[REDACTED:future_kind] stays, counted zero",
	} {
		got, n, err := String(in)
		if err != nil || got != in || n != 0 {
			t.Errorf("String(%q) = %q, %d, %v; want it unchanged, 0", in, got, n, err)
		}
	}
}

func TestRedactInvalidUTF8(t *testing.T) {
	for _, in := range []string{"\xff", "password=\xc3", "ok \xed\xa0\x80 surrogate"} {
		got, n, err := String(in)
		if !errors.Is(err, ErrUnredactable) || got != "" || n != 0 {
			t.Errorf("String(%q) = %q, %d, %v; want ErrUnredactable", in, got, n, err)
		}
	}
	for name, tree := range map[string]any{
		"value":        map[string]any{"note": "ok", "evidence": []any{map[string]any{"summary": "bad \xff"}}},
		"key":          map[string]any{"bad\xffkey": "x"},
		"secret value": map[string]any{"password": "\xff"},
	} {
		out, n, err := Tree(tree)
		if !errors.Is(err, ErrUnredactable) || out != nil || n != 0 {
			t.Errorf("%s: Tree = %v, %d, %v; want ErrUnredactable", name, out, n, err)
		}
		if name == "value" && (err == nil || !strings.Contains(err.Error(), "/evidence/0/summary")) {
			t.Errorf("%s: error %v does not name the JSON pointer", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "bad") && name == "value" {
			t.Errorf("error repeats the value: %v", err)
		}
	}
}

func TestRedactTreeUnsupportedType(t *testing.T) {
	for _, v := range []any{
		map[string]any{"note": []string{"password=x"}},
		map[string]any{"n": 3},
		struct{ Password string }{"x"},
	} {
		if _, _, err := Tree(v); !errors.Is(err, ErrUnredactable) {
			t.Errorf("Tree(%#v): err = %v, want ErrUnredactable", v, err)
		}
	}
}

func TestRedactTree(t *testing.T) {
	in := map[string]any{
		"schema_version": json.Number("1"),
		"fencing_token":  json.Number("3"),
		"complete":       true,
		"nothing":        nil,
		"score":          1.5,
		"workspace":      map[string]any{"head": testHex40, "branch": "fix-12"},
		"pending_mutation": map[string]any{
			"idempotency_key": testHex40,
			"summary":         "comment with GITEA_TOKEN=" + testHex40,
		},
		"recovery": map[string]any{"commands": []any{"git fetch", "git clone https://a:pw12@h.example/o/r"}},
		"Password": "hunter2",
		"db":       map[string]any{"credentials": map[string]any{"user": "app", "list": []any{"a", json.Number("7")}}},
		"headers":  map[string]any{"Authorization": "token " + testHex40, "Cookie": "sid=1", "Accept": "application/json"},
		"token":    "${GITEA_TOKEN}",
		"secret":   "",
	}
	want := map[string]any{
		"schema_version": json.Number("1"),
		"fencing_token":  json.Number("3"),
		"complete":       true,
		"nothing":        nil,
		"score":          1.5,
		"workspace":      map[string]any{"head": testHex40, "branch": "fix-12"},
		"pending_mutation": map[string]any{
			"idempotency_key": testHex40,
			"summary":         "comment with GITEA_TOKEN=[REDACTED:gitea_token]",
		},
		"recovery": map[string]any{"commands": []any{"git fetch", "git clone https://a:[REDACTED:url_userinfo]@h.example/o/r"}},
		"Password": "[REDACTED:secret_field]",
		"db": map[string]any{"credentials": map[string]any{
			"user": "[REDACTED:secret_field]", "list": []any{"[REDACTED:secret_field]", json.Number("7")},
		}},
		"headers": map[string]any{"Authorization": "token [REDACTED:gitea_token]", "Cookie": "[REDACTED:cookie]", "Accept": "application/json"},
		"token":   "${GITEA_TOKEN}",
		"secret":  "",
	}
	before, _ := json.Marshal(in)
	got, n, err := Tree(in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(any(want), got); diff != "" || n != 7 {
		t.Errorf("Tree: n = %d, want 7; -want +got:\n%s", n, diff)
	}
	if after, _ := json.Marshal(in); string(after) != string(before) {
		t.Errorf("Tree modified its input:\n%s\n%s", before, after)
	}
	again, n2, err := Tree(got)
	if err != nil || n2 != 0 || !cmp.Equal(again, got) {
		t.Errorf("second pass: n = %d, err = %v, diff:\n%s", n2, err, cmp.Diff(got, again))
	}
}

// TestRedactTreeNewContainers checks that the result shares no map or slice
// with the input: a caller may change either without touching the other.
func TestRedactTreeNewContainers(t *testing.T) {
	in := map[string]any{"a": map[string]any{"b": []any{"x"}}}
	out, _, err := Tree(in)
	if err != nil {
		t.Fatal(err)
	}
	out.(map[string]any)["a"].(map[string]any)["b"].([]any)[0] = "changed"
	out.(map[string]any)["a"].(map[string]any)["c"] = "added"
	if diff := cmp.Diff(map[string]any{"a": map[string]any{"b": []any{"x"}}}, in); diff != "" {
		t.Errorf("input changed through the output:\n%s", diff)
	}
}

func TestClassifyKeySafeKeys(t *testing.T) {
	for _, k := range []string{"fencing_token", "fencingToken", "Fencing-Token", "idempotency_key", "Idempotency-Key",
		"token_type", "max_tokens", "secret_name", "password_file", "token_url", "lease_id", "run_id", "head", "key"} {
		if f := classifyKey(k, false); f != famNone {
			t.Errorf("classifyKey(%q) = %d, want none", k, f)
		}
	}
	for _, k := range []string{"password", "PASSWORD", "db_password", "dbPassword", "passwd", "secret", "client_secret",
		"token", "access_token", "GITEA_TOKEN", "api_key", "apiKey", "X-Api-Key", "private_key", "privateKey",
		"cookie", "Set-Cookie", "authorization", "credentials", "session_id", "sessionId", "JSESSIONID"} {
		if f := classifyKey(k, false); f == famNone {
			t.Errorf("classifyKey(%q) = none, want a secret family", k)
		}
	}
}

// TestRedactStringCleanDoesNotAllocate: most strings have nothing to redact
// and must cost no garbage.
func TestRedactStringCleanDoesNotAllocate(t *testing.T) {
	for _, s := range []string{
		"go test ./... passed: 412 tests, 0 failures",
		"git -C /srv/agents/w1/acme-widgets reset --hard " + testSHA1,
		`{"head": "` + testSHA1 + `", "fencing_token": 7} see https://git.example.com/o/r/pulls/34`,
	} {
		if a := testing.AllocsPerRun(100, func() { _, _, _ = String(s) }); a != 0 {
			t.Errorf("String(%q) allocates %v times", s, a)
		}
	}
}

// TestRedactHostileInputIsLinear feeds the largest document-sized strings
// built from patterns that make a naive scanner re-read the rest of the line
// at every occurrence.
func TestRedactHostileInputIsLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	const size = 256 << 10
	for _, p := range []string{
		"Cookie: ", "cookie: a", "Cookie: [REDACTED:cookie] ", "Authorization: Digest [REDACTED:x] ",
		`"password": "`, `\"token\": \"`, "password: [REDACTED:x] ", "https://", "://a:", "-----BEGIN PRIVATE KEY-----",
		"bearer ", "password=$X", "--token ", "sk-", "eyJ", "a", ":", "=", "-", "_", "[REDACTED:",
		"password=a[REDACTED:",
		// percent-encoded URLs and pairs
		"%3A%2F%2F", "a%3A%2F%2F", "a%3a//", "s%3A%2F%2Fa%3Ab", "s%3A%2F%2Fa%40", "%3D", "%3d", "token%3D",
		"token%3D[REDACTED:", "%26token%3D", "%", "%3",
		// prose links and snake_case names
		" ", " is ", " to ", " was ", "password is ", "password is a", "password was reset to ", "the password: ",
		"db password: \"", "api key is ", "GITEA_TOKEN ", "GITEA_TOKEN is ", "a_b ", "_ ", "_a", "a_",
		// short password options
		" -p", " -p ", " -pa", "mysql -p", "mysql -p ", "sshpass -p ", "docker login -p ", "login -p x ", "/mysql",
		"pwd=",
		// prefixed tokens
		"npm_", "hf_", "AIza", "hf_Aa", "npm_1",
	} {
		s := strings.Repeat(p, size/len(p))
		start := time.Now()
		if _, _, err := String(s); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 10*time.Second { // quadratic would take minutes
			t.Errorf("%q repeated to 256 KiB took %v", p, d)
		} else if testing.Verbose() && d > 100*time.Millisecond {
			t.Logf("%q repeated to 256 KiB took %v", p, d)
		}
	}
}

// TestRedactIdempotentCombinations glues random fragments of secrets,
// separators, keys and markers together: whatever the first pass makes of
// them, a second pass must change nothing.
func TestRedactIdempotentCombinations(t *testing.T) {
	frags := []string{
		"password", "token", "GITEA_TOKEN", "Authorization", "Cookie", "Set-Cookie", "Bearer", "basic", "token ",
		"api_key", "access_token", "fencing_token", "key", "sid=", "-u ", "--", "agent", "hunter2", "x", "*", "$",
		":", "=", " ", "\n", `"`, "'", `\"`, "{", "}", "[", "]", ",", ";", "&", "?", "@", "://", "https", "-", "_", ".",
		"<", ">", "|", "#", "1.", "[REDACTED:x]", "[REDACTED:", testHex40, testGHP, "eyJhbGciOiJIUzI1NiJ9",
		"eyJzdWIiOiJhZ2VudC03In0", "AKIAIOSFODNN7EXAMPLE", "sk-", "Ab3dE5gH7jK9mN1pQ3sT5vW7", "xoxb-", "12345",
		"-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "cpd_", "ses_0190f5a2c7d47b8e9a1b2c3d4e5f6071",
		"%3A", "%3a", "%2F", "%2f", "%40", "%3D", "%26", "%3F", "%", "//", " is ", " was ", " to ", "now ", "reset ",
		"set ", "gitea ", "api ", "mysql", " -p", "-p", "sshpass", "docker login", " -a ", "redis-cli", "pwd", "PWD",
		"aws_secret_access_key", "db password", "Sup3rS3cret1", "a4c123b", "/", "~",
		"npm_", "hf_", "AIza", "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE5fG7hJ9k",
	}
	r := rand.New(rand.NewPCG(1, 2))
	iterations := 200000
	if testing.Short() {
		iterations = 20000
	}
	for range iterations {
		var b strings.Builder
		for k := r.IntN(16) + 1; k > 0; k-- {
			b.WriteString(frags[r.IntN(len(frags))])
		}
		in := b.String()
		out, _, _ := String(in)
		if again, n, _ := String(out); again != out || n != 0 {
			t.Fatalf("not idempotent:\nin:     %q\nfirst:  %q\nsecond: %q", in, out, again)
		}
	}
}
