package checkpointd_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
)

const testKey = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

func TestParseKeyring(t *testing.T) {
	for _, ok := range []string{testKey, testKey + "\n", "k1 " + testKey, "k1 " + testKey + "\nk2 " + testKey, "k1 " + testKey + "; k3 " + testKey} {
		if _, err := checkpointd.ParseKeyring(ok); err != nil {
			t.Errorf("ParseKeyring(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "not base64!", "AAEC", "k1 AAEC", "key1 " + testKey, "k1 " + testKey + "\nk1 " + testKey,
		testKey + "\n" + testKey, "secret-part another-part"} {
		_, err := checkpointd.ParseKeyring(bad)
		if !errors.Is(err, checkpointd.ErrKey) || !strings.Contains(err.Error(), "malformed") {
			t.Errorf("ParseKeyring(%q) = %v, want a malformed ErrKey", bad, err)
		}
		if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("error %q quotes the key material", err)
		}
	}
}

func TestSealOpenAndRotate(t *testing.T) {
	kr, err := checkpointd.ParseKeyring(testKey)
	if err != nil {
		t.Fatal(err)
	}
	digestKey := kr.DigestKey()
	old := kr.Seal([]byte("recovery: git fetch"), []byte("row-1"))
	if !strings.HasPrefix(old, "k1:") || strings.Contains(old, "recovery") {
		t.Fatalf("sealed value %q", old)
	}
	if pt, err := kr.Open(old, []byte("row-1")); err != nil || string(pt) != "recovery: git fetch" {
		t.Fatalf("Open = %q, %v", pt, err)
	}
	if _, err := kr.Open(old, []byte("row-2")); !errors.Is(err, checkpointd.ErrKey) {
		t.Errorf("a value moved to another row opened: %v", err)
	}
	tampered := old[:len(old)-2] + "AA"
	if _, err := kr.Open(tampered, []byte("row-1")); !errors.Is(err, checkpointd.ErrKey) {
		t.Errorf("a tampered value opened: %v", err)
	}
	if _, err := kr.Open("k9:"+old[3:], []byte("row-1")); !errors.Is(err, checkpointd.ErrKey) {
		t.Errorf("an unknown key id opened: %v", err)
	}

	id, err := kr.Rotate()
	if err != nil || id != "k2" || kr.Active() != "k2" {
		t.Fatalf("Rotate = %q, %v; active %q", id, err, kr.Active())
	}
	if string(kr.DigestKey()) != string(digestKey) {
		t.Error("rotation changed the digest key: retried requests would conflict")
	}
	if !strings.HasPrefix(kr.Seal([]byte("x"), nil), "k2:") {
		t.Error("new data is not sealed with the new key")
	}
	reparsed, err := checkpointd.ParseKeyring(kr.Format())
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := reparsed.Open(old, []byte("row-1")); err != nil || string(pt) != "recovery: git fetch" {
		t.Fatalf("old data after rotation and reload: %q, %v", pt, err)
	}
	if reparsed.Fingerprint("k1") != kr.Fingerprint("k1") || reparsed.Fingerprint("k1") == reparsed.Fingerprint("k2") {
		t.Error("fingerprints do not identify keys")
	}
}
