package checkpointd

// PreparedCheckpoint is a checkpoint document ready for the store:
// validated, digested before redaction, and redacted.
type PreparedCheckpoint struct {
	Doc        *Document // redacted
	Digest     string
	Redactions int
}

// PrepareCheckpoint validates raw against schema v1 and the workflow,
// computes the keyed digest of its canonical pre-redaction form, and redacts
// every string. Nothing unredacted leaves this function except the digest.
// Errors: ErrInvalidJSON, ErrInvalidCheckpoint (with problems).
func PrepareCheckpoint(raw []byte, wf Workflow, digestKey []byte) (*PreparedCheckpoint, error) {
	_, canonical, doc, err := decodeDocument(raw, wf)
	if err != nil {
		return nil, err
	}
	p := &PreparedCheckpoint{Doc: doc, Digest: Digest(digestKey, canonical)}
	if p.Redactions, err = RedactDocument(doc); err != nil {
		return nil, err
	}
	return p, nil
}
