package main

import (
	"database/sql"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/store/storetest"
)

// lastLine splits command output into the lines before the last and the
// last one.
func lastLine(t *testing.T, out string) (before []string, last string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if !strings.HasSuffix(out, "\n") || len(lines) == 0 {
		t.Fatalf("output %q does not end in a line", out)
	}
	return lines[:len(lines)-1], lines[len(lines)-1]
}

var createdRE = regexp.MustCompile(`^created agent token (\S+) \(x\)$`)

// listRow finds the row of token id in `token list` output.
func listRow(t *testing.T, out, id string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "ID NAME ROLE SCOPE CREATED EXPIRES LAST USED REVOKED" {
		t.Errorf("list header %q", lines[0])
	}
	// Columns are two spaces or more apart; a time has single spaces.
	for _, l := range lines[1:] {
		if f := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), -1); len(f) > 0 && f[0] == id {
			return f
		}
	}
	t.Fatalf("token %s not listed:\n%s", id, out)
	return nil
}

// TestTokenLifecycleWhileServing proves token create, list and revoke work
// directly on the database a daemon is serving: the created token is
// printed alone on the last line and authenticates within its scope, list
// never shows a secret, and a revoked token is refused with 401.
func TestTokenLifecycleWhileServing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		t.Parallel()
		dir, dbURL := t.TempDir(), backendURL(t, b)
		d := startServe(t, nil, storeArgs(dir, dbURL)...)
		operator := readSecret(t, tokenPath(dir))
		db := storeArgs(dir, dbURL)

		out, errOut, err := runCLI(t, nil, append(append([]string{"token"}, db...), "create", "--role", "agent", "--name", "x", "--scope", "acme/*")...)
		if err != nil {
			t.Fatalf("token create: %v\n%s", err, errOut)
		}
		before, secret := lastLine(t, out)
		if len(secret) < 32 || strings.ContainsAny(secret, " \t") {
			t.Fatalf("last line %q is not a token alone", secret)
		}
		if strings.Contains(strings.Join(before, "\n"), secret) || strings.Contains(errOut, secret) {
			t.Errorf("the token is printed more than once:\n%s%s", out, errOut)
		}
		if len(before) != 1 || !createdRE.MatchString(before[0]) {
			t.Fatalf("create printed %q before the token, want `created agent token <id> (x)`", before)
		}
		id := createdRE.FindStringSubmatch(before[0])[1]

		call(t, "GET", d.URL+"/v1/sessions", secret, nil).expect(t, http.StatusOK)
		newSession(t, d.URL, secret) // acme/widgets is in acme/*
		outside := map[string]any{"repo": "other/widgets", "role": "author", "agent": sessionBody["agent"]}
		call(t, "POST", d.URL+"/v1/sessions", secret, outside).expect(t, http.StatusForbidden)
		call(t, "POST", d.URL+"/v1/sessions", operator, outside).expect(t, http.StatusCreated)

		// Flags after the subcommand name reach the store too. The daemon
		// writes LAST USED in the background, soon after the use.
		var row []string
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			out, errOut, err = runCLI(t, nil, append([]string{"token", "list"}, db...)...)
			if err != nil {
				t.Fatalf("token list: %v\n%s", err, errOut)
			}
			if row = listRow(t, out, id); len(row) != 8 || row[6] != "-" || time.Now().After(deadline) {
				break
			}
		}
		if strings.Contains(out, secret) || strings.Contains(out, operator) {
			t.Errorf("token list shows a secret:\n%s", out)
		}
		if len(row) != 8 || row[1] != "x" || row[2] != "agent" || row[3] != "acme/*" || row[5] != "-" || row[6] == "-" || row[7] != "-" {
			t.Errorf("list row %q, want x agent acme/* CREATED - LAST-USED -", row)
		}
		if !strings.Contains(out, "bootstrap-operator") {
			t.Errorf("token list lacks the bootstrap operator:\n%s", out)
		}

		// A token is named by the start of its id too, without tok_.
		if _, _, err := runCLI(t, nil, append(append([]string{"token"}, db...), "revoke", "ffff")...); err == nil ||
			!strings.Contains(err.Error(), "no token has an id that begins with tok_ffff") {
			t.Errorf("token revoke of a prefix nothing has: %v", err)
		}
		out, errOut, err = runCLI(t, nil, append(append([]string{"token"}, db...), "revoke", strings.TrimPrefix(id, "tok_")[:16])...)
		if err != nil {
			t.Fatalf("token revoke: %v\n%s", err, errOut)
		}
		revoked := time.Now()
		if strings.TrimSpace(out) != "revoked "+id {
			t.Errorf("revoke printed %q", out)
		}
		// A revocation holds on SQLite at once; on PostgreSQL the daemon's
		// authentication cache may serve it for up to 1 s (in practice
		// until the NOTIFY arrives).
		for b == storetest.Postgres {
			began := time.Now()
			if call(t, "GET", d.URL+"/v1/sessions", secret, nil).status == http.StatusUnauthorized {
				break
			}
			if began.Sub(revoked) > time.Second {
				t.Fatalf("a revoked token still works %v after the revoke", began.Sub(revoked))
			}
			time.Sleep(5 * time.Millisecond)
		}
		r := call(t, "GET", d.URL+"/v1/sessions", secret, nil).expect(t, http.StatusUnauthorized)
		if r.str("code") != "unauthorized" {
			t.Errorf("revoked token answered %s", r.raw)
		}
		call(t, "GET", d.URL+"/v1/sessions", operator, nil).expect(t, http.StatusOK)

		out, _, err = runCLI(t, nil, append([]string{"token", "list"}, db...)...)
		if err != nil {
			t.Fatal(err)
		}
		if row := listRow(t, out, id); row[len(row)-1] == "-" {
			t.Errorf("revoked token listed as unrevoked: %q", row)
		}

		_, _, err = runCLI(t, nil, append(append([]string{"token"}, db...), "revoke", id)...)
		if err == nil || !strings.Contains(err.Error(), "no unrevoked token "+id) {
			t.Errorf("second revoke: %v, want no unrevoked token", err)
		}
	})
}

// TestTokenCreateExpiresAndWarns: --expires sets the token's expiry,
// shown by create and list; an agent token without --scope is still made
// (the fixed words) but create warns on stderr, and --scope '*' says it.
func TestTokenCreateExpiresAndWarns(t *testing.T) {
	t.Parallel()
	db := storeArgs(t.TempDir(), "")
	out, errOut, err := runCLI(t, nil, append(append([]string{"token"}, db...), "create", "--role", "agent", "--name", "y", "--expires", "1h")...)
	if err != nil {
		t.Fatalf("token create: %v\n%s", err, errOut)
	}
	before, _ := lastLine(t, out)
	m := regexp.MustCompile(`^created agent token (\S+) \(y, expires ([^)]+)\)$`).FindStringSubmatch(before[0])
	if m == nil {
		t.Fatalf("create printed %q", before)
	}
	if at, err := time.ParseInLocation(timeLayout, m[2], time.Local); err != nil || at.Sub(time.Now()) < 59*time.Minute || at.Sub(time.Now()) > time.Hour {
		t.Errorf("expires %q (%v), want an hour from now", m[2], err)
	}
	if !strings.Contains(errOut, "warning: this agent token may act on every repo") {
		t.Errorf("no warning for an agent token without --scope: %q", errOut)
	}
	out, _, err = runCLI(t, nil, append([]string{"token", "list"}, db...)...)
	if err != nil {
		t.Fatal(err)
	}
	if row := listRow(t, out, m[1]); len(row) != 8 || row[5] == "-" || row[6] != "-" {
		t.Errorf("list row %q, want an expiry and no use", row)
	}
	_, errOut, err = runCLI(t, nil, append(append([]string{"token"}, db...), "create", "--role", "agent", "--name", "z", "--scope", "*")...)
	if err != nil || errOut != "" {
		t.Errorf("--scope '*': %v, stderr %q", err, errOut)
	}
	for _, bad := range []string{"0s", "-1h", "87601h"} {
		if _, _, err := runCLI(t, nil, append(append([]string{"token"}, db...), "create", "--role", "reader", "--name", "r", "--expires", bad)...); err == nil || !strings.Contains(err.Error(), "--expires") {
			t.Errorf("--expires %s: %v", bad, err)
		}
	}
}

// TestTokenCreateRejectsBadInput proves bad arguments are errors that print
// no token and touch no database.
func TestTokenCreateRejectsBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown role", []string{"--role", "admin", "--name", "x"}, "--role"},
		{"empty role", []string{"--role", "", "--name", "x"}, "--role"},
		{"no role", []string{"--name", "x"}, "role"},
		{"no name", []string{"--role", "agent"}, "name"},
		{"blank name", []string{"--role", "agent", "--name", "  "}, "--name"},
		{"long name", []string{"--role", "agent", "--name", strings.Repeat("n", 1000)}, "--name"},
		{"129-byte name", []string{"--role", "agent", "--name", strings.Repeat("é", 64) + "n"}, "--name"},
		// Control and format characters would make `token list` lie: a
		// newline starts a forged row, a tab shifts the columns, a bidi
		// override reverses what follows.
		{"newline in name", []string{"--role", "agent", "--name", "ci\ntok_forged  x  operator  *"}, "--name"},
		{"carriage return in name", []string{"--role", "agent", "--name", "ci\rx"}, "--name"},
		{"tab in name", []string{"--role", "agent", "--name", "ci\tbot"}, "--name"},
		{"NUL in name", []string{"--role", "agent", "--name", "ci\x00bot"}, "--name"},
		{"escape in name", []string{"--role", "agent", "--name", "ci\x1b[2Jbot"}, "--name"},
		{"DEL in name", []string{"--role", "agent", "--name", "ci\x7fbot"}, "--name"},
		{"C1 control in name", []string{"--role", "agent", "--name", "ci\u0085bot"}, "--name"},
		{"bidi override in name", []string{"--role", "agent", "--name", "ci\u202ebot"}, "--name"},
		{"zero-width space in name", []string{"--role", "agent", "--name", "ci\u200bbot"}, "--name"},
		{"invalid UTF-8 in name", []string{"--role", "agent", "--name", "ci\xffbot"}, "--name"},
		{"scope without repo", []string{"--role", "agent", "--name", "x", "--scope", "acme"}, "--scope"},
		{"scope star owner", []string{"--role", "agent", "--name", "x", "--scope", "*/widgets"}, "--scope"},
		{"scope too deep", []string{"--role", "agent", "--name", "x", "--scope", "acme/*/x"}, "--scope"},
		{"one bad scope of two", []string{"--role", "agent", "--name", "x", "--scope", "acme/*", "--scope", "bad scope/x"}, "--scope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			out, _, err := runCLI(t, nil, append([]string{"token", "--data-dir", dir, "create"}, tc.args...)...)
			if err == nil {
				t.Fatalf("token create %q succeeded; stdout %q", tc.args, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
			if strings.Contains(out, "created") {
				t.Errorf("a token was printed: %q", out)
			}
			mustNotExist(t, dir)
		})
	}
	t.Run("revoke without id", func(t *testing.T) {
		_, _, err := runCLI(t, nil, "token", "--data-dir", t.TempDir(), "revoke")
		if err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("revoke with no id: %v, want usage", err)
		}
	})
	t.Run("revoke unknown id", func(t *testing.T) {
		dir := t.TempDir()
		if _, _, err := runCLI(t, nil, "migrate", "--data-dir", dir); err != nil {
			t.Fatal(err)
		}
		_, _, err := runCLI(t, nil, "token", "--data-dir", dir, "revoke", "tok_"+strings.Repeat("0", 32))
		if err == nil || !strings.Contains(err.Error(), "no unrevoked token") {
			t.Errorf("revoke of an unknown id: %v, want no unrevoked token", err)
		}
		_, _, err = runCLI(t, nil, "token", "--data-dir", dir, "revoke", "tok_doesnotexist")
		if err == nil || !strings.Contains(err.Error(), `"tok_doesnotexist" is not a token id nor the start of one`) {
			t.Errorf("revoke of no id: %v", err)
		}
	})
}

// TestTokenCreateBootstrapsBeforeServe proves token create works on a new
// data directory before any daemon ran, and that an operator created that
// way stands in for the bootstrap token: serve writes no operator.token.
func TestTokenCreateBootstrapsBeforeServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, errOut, err := runCLI(t, nil, "token", "create", "--data-dir", dir, "--role", "operator", "--name", "admin")
	if err != nil {
		t.Fatalf("token create: %v\n%s", err, errOut)
	}
	_, secret := lastLine(t, out)
	d := startServe(t, nil, "--data-dir", dir)
	mustNotExist(t, tokenPath(dir))
	call(t, "GET", d.URL+"/v1/sessions", secret, nil).expect(t, http.StatusOK)
	newSession(t, d.URL, secret)
}

// TestMigrate proves migrate brings a new database to the latest version,
// says which, and is idempotent.
func TestMigrate(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		t.Parallel()
		dir, dbURL := t.TempDir(), backendURL(t, b)
		re := regexp.MustCompile(`^database at version (\d+)\n$`)
		var versions []int
		for range 2 {
			out, errOut, err := runCLI(t, nil, append([]string{"migrate"}, storeArgs(dir, dbURL)...)...)
			if err != nil {
				t.Fatalf("migrate: %v\n%s", err, errOut)
			}
			m := re.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("migrate printed %q", out)
			}
			v, _ := strconv.Atoi(m[1])
			versions = append(versions, v)
		}
		if versions[0] < 1 || versions[0] != versions[1] {
			t.Errorf("versions %v, want the same positive version twice", versions)
		}
		if b == storetest.SQLite {
			if _, err := os.Stat(filepath.Join(dir, "checkpointd.db")); err != nil {
				t.Errorf("no SQLite database in the data directory: %v", err)
			}
		}
	})
}

// TestVersion proves version prints one line: the program name and a
// version (TestVersionString covers what the version says).
func TestVersion(t *testing.T) {
	t.Parallel()
	out, _, err := runCLI(t, nil, "version")
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(out); len(f) < 2 || f[0] != "checkpointd" || strings.Count(out, "\n") != 1 {
		t.Errorf("version printed %q, want one line `checkpointd <version> …`", out)
	}
}

// TestUnknownCommand proves a mistyped command is an error, not a silent
// success.
func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	if _, _, err := runCLI(t, nil, "serv"); err == nil {
		t.Error("an unknown command succeeded")
	}
}

// TestTokenListOneLinePerToken proves every token takes exactly one line
// of `token list`: a name with spaces and non-ASCII letters is shown as
// given, and a name with control characters stored before create refused
// them is shown quoted, never as a forged row.
func TestTokenListOneLinePerToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	name := "CI bot — ünïcode"
	if _, errOut, err := runCLI(t, nil, "token", "create", "--data-dir", dir, "--role", "reader", "--name", "  "+name+" "); err != nil {
		t.Fatalf("token create %q: %v\n%s", name, err, errOut)
	}
	out, _, err := runCLI(t, nil, "token", "create", "--data-dir", dir, "--role", "agent", "--name", "legacy")
	if err != nil {
		t.Fatal(err)
	}
	before, _ := lastLine(t, out)
	legacy := strings.Fields(before[0])[3]
	// A name stored by an older version, which let a newline through.
	db, err := sql.Open("sqlite", filepath.Join(dir, "checkpointd.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	forged := "ci\ntok_forged  x  operator  *  2026-01-01T00:00:00Z  -"
	if _, err := db.ExecContext(t.Context(), `UPDATE api_tokens SET name = ? WHERE id = ?`, forged, legacy); err != nil {
		t.Fatal(err)
	}

	out, _, err = runCLI(t, nil, "token", "list", "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 { // the header and the two tokens
		t.Fatalf("token list printed %d lines for 2 tokens:\n%s", len(lines), out)
	}
	if !strings.Contains(out, "  "+name+"  ") {
		t.Errorf("the name %q is not listed as given:\n%s", name, out)
	}
	if strings.Contains(out, "tok_forged") && !strings.Contains(out, strconv.Quote(forged)) {
		t.Errorf("the stored name is not shown quoted:\n%s", out)
	}
}
