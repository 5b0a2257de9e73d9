package checkpointd

// SchemaVersion is the checkpoint document schema this server writes and
// accepts. See docs/checkpoint.md for the versioning policy.
const SchemaVersion = 1

// Document is a checkpoint document, schema v1, as an agent sends it. The
// JSON Schema in docs/schema/checkpoint.v1.json is the source of truth for
// what is accepted; these types mirror it field for field.
type Document struct {
	SchemaVersion       int               `json:"schema_version"`
	RunID               string            `json:"run_id"`
	FencingToken        int64             `json:"fencing_token"`
	Identity            *Identity         `json:"identity,omitempty"`
	Role                string            `json:"role"`
	Target              *Target           `json:"target,omitempty"`
	Workspace           *Workspace        `json:"workspace,omitempty"`
	Capabilities        []string          `json:"capabilities,omitempty"`
	Leases              []LeaseRef        `json:"leases,omitempty"`
	Stage               string            `json:"stage,omitempty"`
	LastCompletedAction *CompletedAction  `json:"last_completed_action,omitempty"`
	PendingOperation    *PendingOperation `json:"pending_operation,omitempty"`
	PendingMutation     *PendingMutation  `json:"pending_mutation,omitempty"`
	Evidence            []Evidence        `json:"evidence,omitempty"`
	Blocker             *Blocker          `json:"blocker,omitempty"`
	NextAction          *NextAction       `json:"next_action,omitempty"`
	Recovery            *Recovery         `json:"recovery,omitempty"`
	Note                string            `json:"note,omitempty"`
}

// Identity says which agent runtime wrote a checkpoint.
type Identity struct {
	Runtime        string `json:"runtime,omitempty"`
	RuntimeVersion string `json:"runtime_version,omitempty"`
	Provider       string `json:"provider,omitempty"`
	Model          string `json:"model,omitempty"`
	Instance       string `json:"instance,omitempty"`
}

// Target is the forge object the work is about.
type Target struct {
	Repo  string `json:"repo"`
	Issue int64  `json:"issue,omitempty"`
	PR    int64  `json:"pr,omitempty"`
}

// Workspace is where the work happens: the local worktree and the git refs.
type Workspace struct {
	Worktree string `json:"worktree,omitempty"`
	Branch   string `json:"branch,omitempty"`
	Head     string `json:"head,omitempty"`
	Base     string `json:"base,omitempty"`
}

// LeaseRef names a lease the checkpoint relies on, with the fencing token
// the writer believes it holds.
type LeaseRef struct {
	LeaseID      string `json:"lease_id"`
	FencingToken int64  `json:"fencing_token"`
}

// CompletedAction is the last action the run finished.
type CompletedAction struct {
	Kind    string `json:"kind"`
	Summary string `json:"summary,omitempty"`
	At      string `json:"at,omitempty"`
}

// PendingOperation is a long-running, side-effect-free operation in progress.
type PendingOperation struct {
	Kind      string `json:"kind"`
	Summary   string `json:"summary,omitempty"`
	StartedAt string `json:"started_at,omitempty"`
}

// PendingMutation is a forge or repository mutation that may or may not have
// happened; a resuming run checks it by its idempotency key before acting.
type PendingMutation struct {
	Kind           string `json:"kind"`
	Target         string `json:"target,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Summary        string `json:"summary,omitempty"`
}

// Evidence is a pointer to something that proves progress (a test run, a
// commit, a review).
type Evidence struct {
	Kind    string `json:"kind"`
	Ref     string `json:"ref,omitempty"`
	Summary string `json:"summary,omitempty"`
}

// Blocker is what the session waits on.
type Blocker struct {
	Kind      string `json:"kind"`
	Summary   string `json:"summary,omitempty"`
	WaitingOn string `json:"waiting_on,omitempty"`
}

// NextAction is what should happen next, and by whom.
type NextAction struct {
	Actor  string `json:"actor,omitempty"`
	Action string `json:"action,omitempty"`
	Prompt string `json:"prompt,omitempty"`
}

// Recovery tells a new run how to pick the work up.
type Recovery struct {
	Instructions string   `json:"instructions,omitempty"`
	Commands     []string `json:"commands,omitempty"`
}
