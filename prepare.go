package checkpointd

import (
	"encoding/json"
	"fmt"
)

// PreparedCheckpoint is a checkpoint document ready for the store:
// validated, digested before redaction, and redacted.
type PreparedCheckpoint struct {
	Doc        *Document
	Body       []byte // canonical JSON of the redacted document
	Digest     string
	Redactions int
}

// PrepareCheckpoint validates raw against schema v1 and the workflow,
// computes the keyed digest of its canonical pre-redaction form, and redacts
// every string. Nothing unredacted leaves this function except the digest.
// Errors: ErrInvalidJSON, ErrInvalidCheckpoint (with problems).
func PrepareCheckpoint(raw []byte, wf Workflow, digestKey []byte) (*PreparedCheckpoint, error) {
	tree, _, err := DecodeDocument(raw, wf)
	if err != nil {
		return nil, err
	}
	canonical, err := CanonicalJSON(tree)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCheckpoint, err)
	}
	p := &PreparedCheckpoint{Digest: Digest(digestKey, canonical)}
	redacted, n, err := RedactTree(tree)
	if err != nil {
		return nil, err
	}
	if p.Body, err = CanonicalJSON(redacted); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCheckpoint, err)
	}
	p.Redactions = n
	var doc Document
	if err := json.Unmarshal(p.Body, &doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCheckpoint, err)
	}
	p.Doc = &doc
	return p, nil
}
