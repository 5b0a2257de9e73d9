package store

import (
	"encoding/json"
	"fmt"

	"github.com/checkpointd/checkpointd"
)

// readBack reads a stored checkpoint document back whole: the clear JSON
// and the sealed fields, opened under the server's keys with the row's
// AAD and merged in. Every read of a checkpoint goes through it, and the
// drain gate checks with it each latest checkpoint it vouches for, so the
// two never disagree on what is readable. Errors: ErrCheckpointCorrupt
// (the document does not parse, or the seal does not open or does not
// hold what sealing made), ErrKey (the store has no keys).
func (s *Store) readBack(sessionID string, seq int64, document, sealed string) (checkpointd.Document, error) {
	var doc checkpointd.Document
	if err := json.Unmarshal([]byte(document), &doc); err != nil {
		return doc, fmt.Errorf("%w: checkpoint %s/%d: the document does not parse: %w", checkpointd.ErrCheckpointCorrupt, sessionID, seq, err)
	}
	if sealed == "" {
		return doc, nil
	}
	if s.keys == nil {
		return doc, errNoKeys
	}
	private, err := s.keys.Open(sealed, checkpointAAD(sessionID, seq))
	if err != nil {
		return doc, fmt.Errorf("%w: checkpoint %s/%d: %w", checkpointd.ErrCheckpointCorrupt, sessionID, seq, err)
	}
	if err := checkpointd.MergeSealed(&doc, private); err != nil {
		return doc, fmt.Errorf("%w: checkpoint %s/%d: %w", checkpointd.ErrCheckpointCorrupt, sessionID, seq, err)
	}
	return doc, nil
}
