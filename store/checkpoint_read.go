package store

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/checkpointd/checkpointd"
)

// stored is a checkpoint as its row keeps it: the clear document, the
// sealed free text and the digest of the document written with them.
type stored struct {
	SessionID string `db:"session_id"`
	Seq       int64  `db:"seq"`
	Document  string `db:"document"`
	Sealed    string `db:"sealed"`
	Digest    string `db:"document_digest"`
}

// documentDigest is what a checkpoint row keeps of its clear document
// (document_digest, migration 00013), so that damage to it is found even
// where it still parses.
func documentDigest(document []byte) string {
	sum := sha256.Sum256(document)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// legacyDigest marks the rows written before checkpoints kept a digest,
// named by migration 00023; they are parsed instead of checked.
const legacyDigest = "legacy:before-00013"

// legacy reports whether the row is one migration 00023 named.
func (c stored) legacy() bool { return c.Digest == legacyDigest }

// checkDigest fails when the row's document is not the one written with
// its digest, or when the row has no digest at all: every row since 00013
// is written with one and every row before it is legacy, so an empty one
// is a digest lost (or blanked), never a reason to trust less.
func (c stored) checkDigest() error {
	if c.legacy() {
		return nil
	}
	if c.Digest == "" {
		return fmt.Errorf("%w: checkpoint %s/%d: the document's digest is missing", checkpointd.ErrCheckpointCorrupt, c.SessionID, c.Seq)
	}
	if subtle.ConstantTimeCompare([]byte(documentDigest([]byte(c.Document))), []byte(c.Digest)) != 1 {
		return fmt.Errorf("%w: checkpoint %s/%d: the document is not the one written", checkpointd.ErrCheckpointCorrupt, c.SessionID, c.Seq)
	}
	return nil
}

// open opens the sealed free text under the server's keys with the row's
// AAD; GCM authenticates it, so what opens is what was sealed.
func (s *Store) open(c stored) ([]byte, error) {
	if s.keys == nil {
		return nil, errNoKeys
	}
	private, err := s.keys.Open(c.Sealed, CheckpointAAD(c.SessionID, c.Seq))
	if err != nil {
		return nil, fmt.Errorf("%w: checkpoint %s/%d: %w", checkpointd.ErrCheckpointCorrupt, c.SessionID, c.Seq, err)
	}
	return private, nil
}

// readBack reads a stored checkpoint back whole: the clear document checked
// against its digest and parsed, the sealed fields opened and merged in.
// Every read of a checkpoint goes through it. Errors: ErrCheckpointCorrupt
// (the document is not the one written or does not parse, the seal does
// not open or does not hold what sealing made), ErrKey (the store has no
// keys).
func (s *Store) readBack(c stored) (checkpointd.Document, error) {
	var doc checkpointd.Document
	if err := c.checkDigest(); err != nil {
		return doc, err
	}
	if err := json.Unmarshal([]byte(c.Document), &doc); err != nil {
		return doc, fmt.Errorf("%w: checkpoint %s/%d: the document does not parse: %w", checkpointd.ErrCheckpointCorrupt, c.SessionID, c.Seq, err)
	}
	if c.Sealed == "" {
		if err := c.checkSealKept(); err != nil {
			return doc, err
		}
		return doc, nil
	}
	private, err := s.open(c)
	if err != nil {
		return doc, err
	}
	if err := checkpointd.MergeSealed(&doc, private); err != nil {
		return doc, fmt.Errorf("%w: checkpoint %s/%d: %w", checkpointd.ErrCheckpointCorrupt, c.SessionID, c.Seq, err)
	}
	return doc, nil
}

// vouch is what the drain gate checks of a latest checkpoint before it
// vouches for it: that readBack would succeed. A row with a digest is
// checked without parsing — its document is byte for byte the one this
// daemon wrote (json.Marshal of a validated document, which parses) and
// its seal authenticates (what SplitSealed made, which merges) — at a
// tenth of the cost; a row written before digests is read back.
// Errors: as readBack.
func (s *Store) vouch(c stored) error {
	if c.legacy() {
		_, err := s.readBack(c)
		return err
	}
	if err := c.checkDigest(); err != nil {
		return err
	}
	if c.Sealed == "" {
		return c.checkSealKept()
	}
	_, err := s.open(c)
	return err
}

// checkSealKept fails for a row with a digest and no seal: every write that
// stores a digest seals the free text too (empty or not), so a missing seal
// is free text lost — recovery, note, prompt — never a document without it.
func (c stored) checkSealKept() error {
	if c.legacy() {
		return nil
	}
	return fmt.Errorf("%w: checkpoint %s/%d: the sealed free text is missing", checkpointd.ErrCheckpointCorrupt, c.SessionID, c.Seq)
}
