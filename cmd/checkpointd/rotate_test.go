package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestKeyRotation proves `key rotate` adds a key that seals new data after a
// restart, while data sealed with the old key still reads and digests do
// not change.
func TestKeyRotation(t *testing.T) {
	dir := t.TempDir()
	args := storeArgs(dir, backendURL(t, storetest.SQLite))
	d := startServe(t, nil, args...)
	operator := readSecret(t, tokenPath(dir))
	s := newSession(t, d.URL, operator)
	cp := d.URL + "/v1/sessions/" + s.id + "/checkpoints"
	before := call(t, "POST", cp, operator, checkpointDoc(s, "sealed with k1")).expect(t, http.StatusCreated)
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}

	out, _, err := runCLI(t, nil, "key", "rotate", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "added key k2") {
		t.Fatalf("key rotate: %q, %v", out, err)
	}
	if key := readKeyFile(t, keyPath(dir)); !strings.HasPrefix(key, "k1 ") || !strings.Contains(key, "\nk2 ") {
		t.Fatalf("key file after rotation does not hold k1 and k2")
	}

	d = startServe(t, nil, args...)
	cp = d.URL + "/v1/sessions/" + s.id + "/checkpoints"
	old := call(t, "GET", cp+"/1", operator, nil).expect(t, http.StatusOK)
	if old.str("checkpoint", "note") != "sealed with k1" {
		t.Fatalf("data sealed with the old key: %s", old.raw)
	}
	after := call(t, "POST", cp, operator, checkpointDoc(s, "sealed with k2")).expect(t, http.StatusCreated)
	if got := call(t, "GET", cp+"/2", operator, nil).expect(t, http.StatusOK).str("checkpoint", "note"); got != "sealed with k2" {
		t.Fatalf("data sealed with the new key reads %q", got)
	}
	if before.str("checkpoint", "digest") == "" || after.str("checkpoint", "digest") == "" {
		t.Fatal("no digests")
	}
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}

	// Dropping the old key now refuses the start: k1 sealed data.
	kr := readKeyFile(t, keyPath(dir))
	onlyNew := kr[strings.Index(kr, "k2 "):]
	writeTestKey(t, keyPath(dir), onlyNew)
	if err := serveRefused(t, nil, args...); err == nil || !strings.Contains(err.Error(), "key k1") {
		t.Fatalf("start without the old key: %v, want a refusal naming k1", err)
	}
	if _, _, err := runCLI(t, environ{"CHECKPOINTD_KEY": onlyNew}, "key", "rotate", "--data-dir", dir); err == nil {
		t.Fatal("rotating keys that come from CHECKPOINTD_KEY should explain how instead")
	}
}
