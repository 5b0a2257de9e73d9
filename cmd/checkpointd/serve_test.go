package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestServeFirstStartAndRestart proves the first start of a new data
// directory bootstraps an operator token and a key without printing the
// token, that cancelling the context shuts serve down cleanly, and that a
// restart keeps both: the token file is not rewritten and the same key
// still signs (equal documents get equal digests across the restart).
func TestServeFirstStartAndRestart(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		t.Parallel()
		dir, dbURL := t.TempDir(), backendURL(t, b)
		d := startServe(t, nil, storeArgs(dir, dbURL)...)

		operator := readSecret(t, tokenPath(dir))
		key := readKeyFile(t, keyPath(dir))
		if b == storetest.Postgres {
			mustNotExist(t, filepath.Join(dir, "checkpointd.db"))
		}

		call(t, "GET", d.URL+"/v1/sessions", operator, nil).expect(t, http.StatusOK)
		call(t, "GET", d.URL+"/v1/sessions", "", nil).expect(t, http.StatusUnauthorized)
		call(t, "GET", d.URL+"/v1/sessions", operator+"x", nil).expect(t, http.StatusUnauthorized)

		s := newSession(t, d.URL, operator)
		doc := checkpointDoc(s, "same document before and after the restart")
		cp := d.URL + "/v1/sessions/" + s.id + "/checkpoints"
		first := call(t, "POST", cp, operator, doc).expect(t, http.StatusCreated)
		digest := first.str("checkpoint", "digest")
		if !strings.HasPrefix(digest, "hmac-sha256:v1:") {
			t.Fatalf("digest %q, want hmac-sha256:v1:<hex>", digest)
		}

		if err := d.stop(); err != nil {
			t.Fatalf("run after cancel: %v, want nil", err)
		}
		if resp, err := http.Get(d.URL + "/healthz"); err == nil {
			resp.Body.Close()
			t.Errorf("%s still answers after serve returned", d.URL)
		}
		out := d.stdout.String() + d.stderr.String()
		if strings.Contains(out, operator) {
			t.Errorf("serve printed the operator token:\n%s", out)
		}
		if strings.Contains(out, key) {
			t.Errorf("serve printed the server key:\n%s", out)
		}
		if !strings.Contains(d.stderr.String(), tokenPath(dir)) {
			t.Errorf("serve did not say where the operator token is:\n%s", d.stderr)
		}

		tokenInfo, err := os.Stat(tokenPath(dir))
		if err != nil {
			t.Fatal(err)
		}
		// The file system's clock may be coarse: wait so a rewrite would show.
		time.Sleep(20 * time.Millisecond)

		d2 := startServe(t, nil, storeArgs(dir, dbURL)...)
		if got := readSecret(t, tokenPath(dir)); got != operator {
			t.Errorf("restart rewrote operator.token")
		}
		if fi, err := os.Stat(tokenPath(dir)); err != nil || !fi.ModTime().Equal(tokenInfo.ModTime()) {
			t.Errorf("restart touched operator.token (%v)", err)
		}
		if got := readKeyFile(t, keyPath(dir)); got != key {
			t.Errorf("restart replaced the key file")
		}
		if strings.Contains(d2.stderr.String(), "created the first operator token") {
			t.Errorf("restart created another operator token:\n%s", d2.stderr)
		}
		mustNotExist(t, tokenPath(dir)+".tmp")

		second := call(t, "POST", d2.URL+"/v1/sessions/"+s.id+"/checkpoints", operator, doc).expect(t, http.StatusCreated)
		if got := second.num("checkpoint", "seq"); got != 2 {
			t.Errorf("seq after restart %d, want 2", got)
		}
		if got := second.str("checkpoint", "digest"); got != digest {
			t.Errorf("digest of the same document after restart %q, want %q: the digest key changed", got, digest)
		}
		if strings.Contains(d2.stdout.String()+d2.stderr.String(), operator) {
			t.Errorf("restarted serve printed the operator token")
		}
		if err := d2.stop(); err != nil {
			t.Fatalf("run after cancel: %v, want nil", err)
		}
	})
}

// TestServeOneDaemonPerSQLiteFile proves a second serve of the same SQLite
// database is refused however the file is named, leaves the first serving
// and its files alone, and that the lock goes with the first daemon.
func TestServeOneDaemonPerSQLiteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "checkpointd.db")
	first := startServe(t, nil, "--data-dir", dir)
	operator := readSecret(t, tokenPath(dir))

	for _, tc := range []struct {
		name string
		env  environ
		args []string
	}{
		{"same data dir", nil, []string{"--data-dir", dir}},
		{"same data dir, explicit key", nil, []string{"--data-dir", dir, "--key-file", keyPath(dir)}},
		{"data dir from env", environ{"CHECKPOINTD_DATA_DIR": dir}, nil},
		{"database path", nil, []string{"--data-dir", t.TempDir(), "--database-url", db}},
		{"sqlite URL", nil, []string{"--data-dir", t.TempDir(), "--database-url", "sqlite://" + db}},
		{"database from env", environ{"CHECKPOINTD_DATABASE_URL": db}, []string{"--data-dir", t.TempDir()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := serveRefused(t, tc.env, tc.args...)
			for _, want := range []string{db + ".lock", "one daemon per SQLite file"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}

	call(t, "GET", first.URL+"/v1/sessions", operator, nil).expect(t, http.StatusOK)
	if got := readSecret(t, tokenPath(dir)); got != operator {
		t.Errorf("a refused start rewrote operator.token")
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	// The lock is released with the daemon: the next start succeeds.
	again := startServe(t, nil, "--data-dir", dir)
	call(t, "GET", again.URL+"/v1/sessions", operator, nil).expect(t, http.StatusOK)
}

// TestServeReplicasSharePostgres proves the SQLite lock does not apply to
// PostgreSQL (replicas share one database), that a replica started with
// the same key serves the same tokens and digests, and that only the first
// start bootstraps an operator token.
func TestServeReplicasSharePostgres(t *testing.T) {
	storetest.RequirePostgres(t)
	t.Parallel()
	dbURL := storetest.URL(t, storetest.Postgres)
	dir1, dir2 := t.TempDir(), t.TempDir()
	a := startServe(t, nil, storeArgs(dir1, dbURL)...)
	operator := readSecret(t, tokenPath(dir1))
	b := startServe(t, nil, append(storeArgs(dir2, dbURL), "--key-file", keyPath(dir1))...)
	mustNotExist(t, tokenPath(dir2))
	mustNotExist(t, keyPath(dir2))

	s := newSession(t, a.URL, operator)
	doc := checkpointDoc(s, "one document, two replicas")
	ra := call(t, "POST", a.URL+"/v1/sessions/"+s.id+"/checkpoints", operator, doc).expect(t, http.StatusCreated)
	rb := call(t, "POST", b.URL+"/v1/sessions/"+s.id+"/checkpoints", operator, doc).expect(t, http.StatusCreated)
	if ra.str("checkpoint", "digest") != rb.str("checkpoint", "digest") {
		t.Errorf("replicas with one key digest alike: %q vs %q", ra.str("checkpoint", "digest"), rb.str("checkpoint", "digest"))
	}
	if ra.num("checkpoint", "seq") != 1 || rb.num("checkpoint", "seq") != 2 {
		t.Errorf("seqs %d, %d; want 1, 2", ra.num("checkpoint", "seq"), rb.num("checkpoint", "seq"))
	}

	// A replica with no key of its own is refused rather than handed a
	// fresh key, and one that brings another key is refused too: neither
	// may write digests the others cannot verify.
	fresh := t.TempDir()
	err := serveRefused(t, nil, storeArgs(fresh, dbURL)...)
	wantRefusal(t, err, nil, "refusing to start", keyPath(fresh), "missing", "written with key")
	mustNotExist(t, keyPath(fresh))
	other := filepath.Join(t.TempDir(), "other.key")
	writeTestKey(t, other, randomKey(t))
	err = serveRefused(t, nil, append(storeArgs(t.TempDir(), dbURL), "--key-file", other)...)
	if !strings.Contains(err.Error(), "key mismatch") {
		t.Errorf("error %q, want a key mismatch", err)
	}
}

// TestServeListenFailureReleasesTheDatabase proves a listen failure is an
// error naming the cause, not a hang, and leaves no lock behind.
func TestServeListenFailureReleasesTheDatabase(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	err = serveRefused(t, nil, "--data-dir", dir, "--listen", busy.Addr().String())
	if !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("error %q, want the address in use", err)
	}
	startServe(t, nil, "--data-dir", dir)
}

// TestServeCreatesTheSQLiteDatabaseDirectory proves serve, like migrate and
// token create, creates the directory of an SQLite --database-url.
//
// Bug: serve takes the lock file next to the database before openStore
// creates its directory, so it fails with "open ….lock: no such file or
// directory" where migrate succeeds.
func TestServeCreatesTheSQLiteDatabaseDirectory(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"migrate", "serve"} {
		t.Run(cmd, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "new", "sub", "checkpointd.db")
			args := []string{"--data-dir", t.TempDir(), "--database-url", db}
			if cmd == "migrate" {
				if _, _, err := runCLI(t, nil, append([]string{"migrate"}, args...)...); err != nil {
					t.Fatalf("migrate: %v", err)
				}
			} else {
				startServe(t, nil, args...)
			}
			if _, err := os.Stat(db); err != nil {
				t.Errorf("no database at %s: %v", db, err)
			}
		})
	}
}

// TestServeKeepsBootstrapSecretAfterInterruptedStart proves the bootstrap operator
// secret is not lost when the process dies after the token is stored but
// before operator.token is in place (the state is made by hand: the secret
// only in operator.token.tmp, its hash in the database).
//
// Bug: bootstrapOperator writes the secret to operator.token.tmp, commits
// its hash, then renames. After a crash between commit and rename the next
// start overwrites operator.token.tmp with a fresh, unstored secret and
// deletes it, so the only copy of the stored operator secret is destroyed.
func TestServeKeepsBootstrapSecretAfterInterruptedStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startServe(t, nil, "--data-dir", dir)
	operator := readSecret(t, tokenPath(dir))
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tokenPath(dir), tokenPath(dir)+".tmp"); err != nil {
		t.Fatal(err)
	}

	d = startServe(t, nil, "--data-dir", dir)
	for _, path := range []string{tokenPath(dir), tokenPath(dir) + ".tmp"} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		secret := strings.TrimSpace(string(b))
		if call(t, "GET", d.URL+"/v1/sessions", secret, nil).status == http.StatusOK {
			return
		}
	}
	t.Errorf("after the restart no file in %s holds a working operator token (the stored one was %d characters); "+
		"the bootstrap secret is lost", dir, len(operator))
}
