package checkpointd

import (
	"encoding/json"
	"strconv"
)

// documentFromTree builds the typed Document from a tree the fast path
// accepted, instead of encoding it canonically and decoding that again with
// encoding/json (the second of two JSON decodes per write). It gives what
// that decode gives — a present empty array is an empty non-nil slice, a
// present object a non-nil pointer — and returns false on anything it does
// not expect (a field Document lacks, a value of another shape), so the
// caller falls back to the decode and its error. The differential tests
// compare the two on every document the fast path takes.
func documentFromTree(m map[string]any) (*Document, bool) {
	t := treeReader{ok: true}
	d := new(Document)
	for k, v := range m {
		switch k {
		case "schema_version":
			d.SchemaVersion = int(t.int(v))
		case "run_id":
			d.RunID = t.str(v)
		case "fencing_token":
			d.FencingToken = t.int(v)
		case "role":
			d.Role = t.str(v)
		case "stage":
			d.Stage = t.str(v)
		case "note":
			d.Note = t.str(v)
		case "identity":
			d.Identity = new(Identity)
			t.fields(v, map[string]*string{"runtime": &d.Identity.Runtime, "runtime_version": &d.Identity.RuntimeVersion,
				"provider": &d.Identity.Provider, "model": &d.Identity.Model, "instance": &d.Identity.Instance}, nil)
		case "target":
			d.Target = new(Target)
			t.fields(v, map[string]*string{"repo": &d.Target.Repo}, map[string]*int64{"issue": &d.Target.Issue, "pr": &d.Target.PR})
		case "workspace":
			d.Workspace = new(Workspace)
			t.fields(v, map[string]*string{"worktree": &d.Workspace.Worktree, "branch": &d.Workspace.Branch,
				"head": &d.Workspace.Head, "base": &d.Workspace.Base}, nil)
		case "capabilities":
			d.Capabilities = treeSlice(&t, v, func(e any, s *string) { *s = t.str(e) })
		case "leases":
			d.Leases = treeSlice(&t, v, func(e any, l *LeaseRef) {
				t.fields(e, map[string]*string{"lease_id": &l.LeaseID}, map[string]*int64{"fencing_token": &l.FencingToken})
			})
		case "last_completed_action":
			a := new(CompletedAction)
			t.fields(v, map[string]*string{"kind": &a.Kind, "summary": &a.Summary, "at": &a.At}, nil)
			d.LastCompletedAction = a
		case "pending_operation":
			o := new(PendingOperation)
			t.fields(v, map[string]*string{"kind": &o.Kind, "summary": &o.Summary, "started_at": &o.StartedAt}, nil)
			d.PendingOperation = o
		case "pending_mutation":
			p := new(PendingMutation)
			t.fields(v, map[string]*string{"kind": &p.Kind, "target": &p.Target, "idempotency_key": &p.IdempotencyKey, "summary": &p.Summary}, nil)
			d.PendingMutation = p
		case "evidence":
			d.Evidence = treeSlice(&t, v, func(e any, ev *Evidence) {
				t.fields(e, map[string]*string{"kind": &ev.Kind, "ref": &ev.Ref, "summary": &ev.Summary}, nil)
			})
		case "blocker":
			b := new(Blocker)
			t.fields(v, map[string]*string{"kind": &b.Kind, "summary": &b.Summary, "waiting_on": &b.WaitingOn}, nil)
			d.Blocker = b
		case "next_action":
			n := new(NextAction)
			t.fields(v, map[string]*string{"actor": &n.Actor, "action": &n.Action, "prompt": &n.Prompt}, nil)
			d.NextAction = n
		case "recovery":
			r := new(Recovery)
			obj, _ := v.(map[string]any)
			for rk, rv := range obj {
				switch rk {
				case "instructions":
					r.Instructions = t.str(rv)
				case "commands":
					r.Commands = treeSlice(&t, rv, func(e any, s *string) { *s = t.str(e) })
				default:
					t.ok = false
				}
			}
			t.ok = t.ok && obj != nil
			d.Recovery = r
		default:
			return nil, false
		}
		if !t.ok {
			return nil, false
		}
	}
	return d, true
}

// treeReader reads values of a validated tree; ok turns false on the first
// value of an unexpected shape.
type treeReader struct{ ok bool }

func (t *treeReader) str(v any) string {
	s, ok := v.(string)
	t.ok = t.ok && ok
	return s
}

func (t *treeReader) int(v any) int64 {
	n, ok := v.(json.Number)
	x, err := strconv.ParseInt(string(n), 10, 64)
	t.ok = t.ok && ok && err == nil
	return x
}

// fields reads an object of string and integer members.
func (t *treeReader) fields(v any, strs map[string]*string, ints map[string]*int64) {
	m, ok := v.(map[string]any)
	if !ok {
		t.ok = false
		return
	}
	for k, e := range m {
		if p, ok := strs[k]; ok {
			*p = t.str(e)
		} else if p, ok := ints[k]; ok {
			*p = t.int(e)
		} else {
			t.ok = false
		}
	}
}

func treeSlice[T any](t *treeReader, v any, read func(e any, into *T)) []T {
	list, ok := v.([]any)
	if !ok {
		t.ok = false
		return nil
	}
	out := make([]T, len(list))
	for i, e := range list {
		read(e, &out[i])
	}
	return out
}
