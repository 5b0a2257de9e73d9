package checkpointd

import (
	"encoding/json"
	"fmt"
)

// sealedFields is the free-text part of a checkpoint document: what agents
// write prose, commands and pasted output into. It is stored encrypted
// (after redaction); the rest stays queryable in the clear.
type sealedFields struct {
	Note             string            `json:"note,omitempty"`
	Evidence         []Evidence        `json:"evidence,omitempty"`
	Recovery         *Recovery         `json:"recovery,omitempty"`
	Blocker          *Blocker          `json:"blocker,omitempty"`
	PendingOperation *PendingOperation `json:"pending_operation,omitempty"`
	PendingMutation  *PendingMutation  `json:"pending_mutation,omitempty"`
	NextActionPrompt string            `json:"next_action_prompt,omitempty"`
}

// SplitSealed separates a document into the part stored in the clear and
// the JSON of its free-text fields, which the store seals.
func SplitSealed(doc Document) (clear Document, private []byte) {
	f := sealedFields{Note: doc.Note, Evidence: doc.Evidence, Recovery: doc.Recovery, Blocker: doc.Blocker,
		PendingOperation: doc.PendingOperation, PendingMutation: doc.PendingMutation}
	clear = doc
	clear.Note, clear.Evidence, clear.Recovery, clear.Blocker = "", nil, nil, nil
	clear.PendingOperation, clear.PendingMutation = nil, nil
	if doc.NextAction != nil {
		f.NextActionPrompt = doc.NextAction.Prompt
		na := *doc.NextAction
		na.Prompt = ""
		clear.NextAction = &na
	}
	private, _ = json.Marshal(f) // plain structs of strings cannot fail
	return clear, private
}

// MergeSealed puts the unsealed free-text fields back into a document.
// Errors wrap ErrKey when private is not what SplitSealed produced.
func MergeSealed(doc *Document, private []byte) error {
	var f sealedFields
	if err := json.Unmarshal(private, &f); err != nil {
		return fmt.Errorf("%w: sealed fields unreadable: %v", ErrKey, err)
	}
	doc.Note, doc.Evidence, doc.Recovery, doc.Blocker = f.Note, f.Evidence, f.Recovery, f.Blocker
	doc.PendingOperation, doc.PendingMutation = f.PendingOperation, f.PendingMutation
	if f.NextActionPrompt != "" {
		if doc.NextAction == nil {
			doc.NextAction = &NextAction{}
		}
		doc.NextAction.Prompt = f.NextActionPrompt
	}
	return nil
}
