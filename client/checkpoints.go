package client

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/checkpointd/checkpointd"
)

// Checkpoints calls the checkpoint routes (/v1/sessions/{id}/checkpoints…).
type Checkpoints struct{ c *Client }

// CheckpointWritten is the answer of Write.
type CheckpointWritten struct {
	// Checkpoint is as stored: redacted, with its seq, digest and
	// completeness.
	Checkpoint *checkpointd.Checkpoint `json:"checkpoint"`
	// Replayed is true when the daemon answered an earlier write of the
	// same key: the checkpoint was written once, by that write.
	Replayed bool `json:"-"`
	// IdempotencyKey is the key the write carried.
	IdempotencyKey string `json:"-"`
}

// Write writes a checkpoint for the session's current run: doc.RunID and
// doc.FencingToken must be the run's (else 409 run_superseded: another run
// took over, stop working). It always carries an Idempotency-Key (opts, or
// one drawn for this call) and is retried on transport failures with it,
// so a retry never writes twice. A document that breaks the schema is 422
// invalid_checkpoint with Problems by JSON pointer.
func (cs *Checkpoints) Write(ctx context.Context, sessionID string, doc *checkpointd.Document, opts *WriteOptions) (*CheckpointWritten, error) {
	return cs.write(ctx, sessionID, doc, opts)
}

// WriteRaw is Write for a document already encoded (e.g. one a model
// produced): it is sent byte for byte, so the daemon judges exactly it,
// unknown members included.
func (cs *Checkpoints) WriteRaw(ctx context.Context, sessionID string, doc json.RawMessage, opts *WriteOptions) (*CheckpointWritten, error) {
	return cs.write(ctx, sessionID, doc, opts)
}

func (cs *Checkpoints) write(ctx context.Context, sessionID string, doc any, opts *WriteOptions) (*CheckpointWritten, error) {
	r, err := newRequest(http.MethodPost, sessionPath(sessionID, "checkpoints"), nil, doc)
	if err != nil {
		return nil, err
	}
	r.idemKey = opts.key()
	var out CheckpointWritten
	ans, err := cs.c.call(ctx, r, &out)
	if err != nil {
		return nil, err
	}
	out.Replayed, out.IdempotencyKey = ans.replayed, r.idemKey
	return &out, nil
}

type checkpointAnswer struct {
	Checkpoint *checkpointd.Checkpoint `json:"checkpoint"`
}

// Get reads checkpoint seq of the session (redacted, unsealed); 404 when
// there is none.
func (cs *Checkpoints) Get(ctx context.Context, sessionID string, seq int64) (*checkpointd.Checkpoint, error) {
	return cs.get(ctx, sessionID, strconv.FormatInt(seq, 10))
}

// Latest reads the session's latest checkpoint; 404 before the first.
func (cs *Checkpoints) Latest(ctx context.Context, sessionID string) (*checkpointd.Checkpoint, error) {
	return cs.get(ctx, sessionID, "latest")
}

func (cs *Checkpoints) get(ctx context.Context, sessionID, which string) (*checkpointd.Checkpoint, error) {
	var out checkpointAnswer
	if err := cs.c.get(ctx, sessionPath(sessionID, "checkpoints", which), nil, &out); err != nil {
		return nil, err
	}
	return out.Checkpoint, nil
}

// List reads one page of the session's checkpoint history, newest first.
func (cs *Checkpoints) List(ctx context.Context, sessionID string, opts ListOptions) (*Page[checkpointd.CheckpointSummary], error) {
	return getPage[checkpointd.CheckpointSummary](ctx, cs.c, sessionPath(sessionID, "checkpoints"), url.Values{}, opts)
}

// All walks the session's whole checkpoint history, newest first.
func (cs *Checkpoints) All(ctx context.Context, sessionID string, opts ListOptions) iter.Seq2[checkpointd.CheckpointSummary, error] {
	return walk(ctx, opts, func(ctx context.Context, lo ListOptions) (*Page[checkpointd.CheckpointSummary], error) {
		return cs.List(ctx, sessionID, lo)
	})
}
