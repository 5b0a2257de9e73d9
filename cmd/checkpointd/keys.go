package main

import (
	"context"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/checkpointd/checkpointd/store"
)

// keySize is the size of the server key: 256 bits.
const keySize = 32

// keySource says where the server key comes from.
type keySource struct {
	file     string // key file path
	explicit bool   // the file was configured, not the default: it must exist
	env      string // CHECKPOINTD_KEY, base64; wins over the file
}

// loadKey returns the server key, creating the key file on the first start
// of a new database, and checks its fingerprint against the one the database
// was written with. Every failure refuses the start: without the right key
// digests cannot be compared and sealed data cannot be read.
func loadKey(ctx context.Context, s *store.Store, src keySource) ([]byte, error) {
	key, err := readKey(ctx, s, src)
	if err != nil {
		return nil, err
	}
	fp := keyFingerprint(key)
	inForce, err := s.InitSetting(ctx, store.SettingKeyFingerprint, fp)
	if err != nil {
		return nil, fmt.Errorf("record key fingerprint: %w", err)
	}
	if inForce != fp {
		return nil, fmt.Errorf("key mismatch: the database was written with key %s but the loaded key is %s; "+
			"start with the key the database was written with (key file or CHECKPOINTD_KEY)", inForce, fp)
	}
	return key, nil
}

func readKey(ctx context.Context, s *store.Store, src keySource) ([]byte, error) {
	if src.env != "" {
		key, err := decodeKey(src.env)
		if err != nil {
			return nil, fmt.Errorf("CHECKPOINTD_KEY: %w", err)
		}
		return key, nil
	}
	b, err := os.ReadFile(src.file)
	switch {
	case err == nil:
		key, err := decodeKey(string(b))
		if err != nil {
			return nil, fmt.Errorf("key file %s: %w", src.file, err)
		}
		return key, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("key file %s is unreadable: %w", src.file, err)
	case src.explicit:
		return nil, fmt.Errorf("key file %s does not exist; restore it, or point --key-file at the key this database was written with", src.file)
	}
	if fp, ok, err := s.Setting(ctx, store.SettingKeyFingerprint); err != nil {
		return nil, err
	} else if ok {
		return nil, fmt.Errorf("key file %s is missing but the database was written with key %s; restore the key file or set CHECKPOINTD_KEY", src.file, fp)
	}
	return createKey(src.file)
}

// createKey writes a fresh key, readable only by its owner, and never
// overwrites an existing file.
func createKey(path string) ([]byte, error) {
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create key file: %w", err)
	}
	_, err = f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("write key file: %w", err)
	}
	return key, nil
}

func decodeKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, errors.New("malformed: want the base64 encoding of 32 random bytes (e.g. `head -c32 /dev/urandom | base64`)")
	}
	if len(key) != keySize {
		return nil, fmt.Errorf("malformed: want %d bytes, got %d", keySize, len(key))
	}
	return key, nil
}

// keyFingerprint identifies a key without revealing it.
func keyFingerprint(key []byte) string {
	sum := sha256.Sum256(append([]byte("checkpointd key fingerprint\x00"), key...))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// deriveKey derives a purpose-specific subkey, so the digest key and the
// sealing keys are independent even though one secret is stored.
func deriveKey(master []byte, purpose string) []byte {
	k, err := hkdf.Key(sha256.New, master, nil, "checkpointd "+purpose, keySize)
	if err != nil {
		panic(err) // only for lengths HKDF cannot produce
	}
	return k
}
