package main

import (
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// randomKey is a well-formed server key: base64 of 32 random bytes.
func randomKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, checkpointd.KeySize)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// readKeyFile checks that the key file at path is owner-only and holds
// well-formed key material, and returns its content.
func readKeyFile(t *testing.T, path string) string {
	t.Helper()
	b := readOwnerOnly(t, path)
	if _, err := checkpointd.ParseKeyring(string(b)); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return strings.TrimSpace(string(b))
}

func writeTestKey(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// wantRefusal checks that err says each of wants and never echoes key
// material.
func wantRefusal(t *testing.T, err error, secrets []string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
	for _, s := range secrets {
		if len(s) >= 8 && strings.Contains(err.Error(), strings.TrimSpace(s)) {
			t.Errorf("error %q reveals the key material", err)
		}
	}
}

// TestServeRefusesMissingKeyFile proves a configured key file that does not
// exist (or cannot be read) refuses the start, names the path and is not
// silently created.
func TestServeRefusesMissingKeyFile(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.key")
	for _, tc := range []struct {
		name string
		env  environ
		args []string
		want string
	}{
		{"flag", nil, []string{"--key-file", missing}, "does not exist"},
		{"env", environ{"CHECKPOINTD_KEY_FILE": missing}, nil, "does not exist"},
		// A directory stands in for an unreadable file: root reads any mode.
		{"unreadable", nil, []string{"--key-file", t.TempDir()}, "unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			err := serveRefused(t, tc.env, append([]string{"--data-dir", dir}, tc.args...)...)
			path := missing
			if tc.name == "unreadable" {
				path = tc.args[1]
			}
			wantRefusal(t, err, nil, "refusing to start", path, tc.want)
			mustNotExist(t, missing)
			mustNotExist(t, keyPath(dir))
			mustNotExist(t, tokenPath(dir))
		})
	}
}

// TestServeRefusesMalformedKey proves a key that is not base64 of exactly
// 32 bytes refuses the start from every source, says "malformed", names
// the source, leaves a key file as it was and never echoes the key.
func TestServeRefusesMalformedKey(t *testing.T) {
	t.Parallel()
	for _, bad := range []struct{ name, key, want string }{
		{"not base64", "this is not base64 at all!", "malformed"},
		{"16 bytes", base64.StdEncoding.EncodeToString(make([]byte, 16)), "malformed"},
		{"64 bytes", base64.StdEncoding.EncodeToString(make([]byte, 64)), "malformed"},
		{"url alphabet", base64.RawURLEncoding.EncodeToString([]byte(strings.Repeat("\xfb\xff", 16))), "malformed"},
		// Empty is refused; whether it is called malformed or absent is
		// the implementation's choice.
		{"empty file", "", ""},
	} {
		t.Run(bad.name, func(t *testing.T) {
			t.Parallel()
			secrets := []string{bad.key}
			t.Run("explicit key file", func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(t.TempDir(), "server.key")
				writeTestKey(t, path, bad.key)
				err := serveRefused(t, nil, "--data-dir", dir, "--key-file", path)
				wantRefusal(t, err, secrets, "refusing to start", path, bad.want)
				if b, _ := os.ReadFile(path); string(b) != bad.key {
					t.Errorf("the key file was rewritten")
				}
			})
			t.Run("default key file", func(t *testing.T) {
				dir := t.TempDir()
				writeTestKey(t, keyPath(dir), bad.key)
				err := serveRefused(t, nil, "--data-dir", dir)
				wantRefusal(t, err, secrets, "refusing to start", keyPath(dir), bad.want)
				if b, _ := os.ReadFile(keyPath(dir)); string(b) != bad.key {
					t.Errorf("the key file was rewritten")
				}
				mustNotExist(t, tokenPath(dir))
			})
			if bad.key == "" {
				return // an empty variable is an unset one
			}
			t.Run("CHECKPOINTD_KEY", func(t *testing.T) {
				dir := t.TempDir()
				err := serveRefused(t, environ{"CHECKPOINTD_KEY": bad.key}, "--data-dir", dir)
				wantRefusal(t, err, secrets, "refusing to start", "CHECKPOINTD_KEY", bad.want)
				mustNotExist(t, keyPath(dir))
			})
		})
	}
}

// TestServeRefusesKeyMismatch proves a database first served with one key
// refuses another from any source, without revealing either, and serves
// again with the key it was written with.
func TestServeRefusesKeyMismatch(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		t.Parallel()
		keyA, keyB := randomKey(t), randomKey(t)
		fileA, fileB := filepath.Join(t.TempDir(), "a.key"), filepath.Join(t.TempDir(), "b.key")
		writeTestKey(t, fileA, keyA+"\n")
		writeTestKey(t, fileB, keyB)
		secrets := []string{keyA, keyB}

		for _, tc := range []struct {
			name        string
			first, then environ
			firstArgs   []string
			thenArgs    []string
		}{
			{name: "env then env", first: environ{"CHECKPOINTD_KEY": keyA}, then: environ{"CHECKPOINTD_KEY": keyB}},
			{name: "file then file", firstArgs: []string{"--key-file", fileA}, thenArgs: []string{"--key-file", fileB}},
			{name: "env then file", first: environ{"CHECKPOINTD_KEY": keyA}, thenArgs: []string{"--key-file", fileB}},
			{name: "default file then env", then: environ{"CHECKPOINTD_KEY": keyB}},
			// The variable wins over a key file, so a right file does not
			// rescue a wrong variable.
			{name: "env overrides the right file", first: environ{"CHECKPOINTD_KEY": keyA},
				then: environ{"CHECKPOINTD_KEY": keyB}, thenArgs: []string{"--key-file", fileA}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				dir, dbURL := t.TempDir(), backendURL(t, b)
				d := startServe(t, tc.first, append(storeArgs(dir, dbURL), tc.firstArgs...)...)
				if err := d.stop(); err != nil {
					t.Fatal(err)
				}
				err := serveRefused(t, tc.then, append(storeArgs(dir, dbURL), tc.thenArgs...)...)
				wantRefusal(t, err, secrets, "refusing to start", "key mismatch")

				// The same key from another source is the same key.
				again := environ{"CHECKPOINTD_KEY": keyA}
				if tc.first == nil && tc.firstArgs == nil {
					again = environ{"CHECKPOINTD_KEY": readKeyFile(t, keyPath(dir))}
				}
				startServe(t, again, storeArgs(dir, dbURL)...)
			})
		}
	})
}

// TestServeRefusesDeletedDefaultKey proves that losing the default key file
// of a database that was written with it refuses the start instead of
// minting a new key, and that restoring the file recovers.
func TestServeRefusesDeletedDefaultKey(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		t.Parallel()
		dir, dbURL := t.TempDir(), backendURL(t, b)
		d := startServe(t, nil, storeArgs(dir, dbURL)...)
		if err := d.stop(); err != nil {
			t.Fatal(err)
		}
		key := readKeyFile(t, keyPath(dir))
		if err := os.Remove(keyPath(dir)); err != nil {
			t.Fatal(err)
		}
		err := serveRefused(t, nil, storeArgs(dir, dbURL)...)
		wantRefusal(t, err, []string{key}, "refusing to start", keyPath(dir), "missing", "written with key")
		mustNotExist(t, keyPath(dir))

		writeTestKey(t, keyPath(dir), key+"\n")
		startServe(t, nil, storeArgs(dir, dbURL)...)
	})
}

// TestServeKeyFromEnvWritesNoFile proves CHECKPOINTD_KEY is used as given:
// no key file appears, and the same key later read from a file is accepted.
func TestServeKeyFromEnvWritesNoFile(t *testing.T) {
	t.Parallel()
	dir, key := t.TempDir(), randomKey(t)
	d := startServe(t, environ{"CHECKPOINTD_KEY": key}, "--data-dir", dir)
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, keyPath(dir))
	if strings.Contains(d.stdout.String()+d.stderr.String(), key) {
		t.Errorf("serve printed the key")
	}
	path := filepath.Join(t.TempDir(), "k")
	writeTestKey(t, path, key+"\n")
	startServe(t, environ{"CHECKPOINTD_KEY_FILE": path}, "--data-dir", dir)
}
