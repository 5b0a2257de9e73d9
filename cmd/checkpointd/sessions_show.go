package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
)

// sessionView is everything `sessions show` reads about one session, each
// part as the daemon sent it: the --json output, and what the person's
// output is decoded from. A part the token may not read (the resume
// verdict for a reader) is null with its problem beside it.
type sessionView struct {
	Session json.RawMessage `json:"session"`
	// Checkpoint is the latest checkpoint document, null before the first.
	Checkpoint json.RawMessage `json:"checkpoint"`
	// Resume is GET …/resume's whole answer; ResumeError the problem that
	// answered instead (a reader's token is 403 there).
	Resume      json.RawMessage `json:"resume"`
	ResumeError json.RawMessage `json:"resume_error,omitempty"`
	// Leases are the leases the session holds now.
	Leases []json.RawMessage `json:"leases"`
	// Events are the latest events (--events of them), oldest first.
	Events []json.RawMessage `json:"events"`
}

// Bounds of the reads of one `sessions show`.
const (
	showMaxLeases = 100
	// showMaxEventPages bounds the walk to the end of the event log, which
	// has no newest-first order: 20 pages of 500.
	showMaxEventPages = 20
)

func sessionsShow(ctx context.Context, c *cli.Command, stdout io.Writer) error {
	id, err := sessionArg(c)
	if err != nil {
		return err
	}
	cl, err := newReaderClient(c)
	if err != nil {
		return err
	}
	if id, err = resolveSession(ctx, c, cl, id); err != nil {
		return err
	}
	v, err := readSession(ctx, cl, id, c.Int("events"))
	if err != nil {
		if gone := goneError(id, err, zoneOf(c)); gone != nil {
			return gone
		}
		return sessionError("sessions show", id, err)
	}
	if forScripts(c) {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return printAnswer(c, stdout, b)
	}
	return printSessionView(stdout, v, nowIn(c))
}

// readSession reads the parts of a sessionView. Only the session itself
// must be readable: the other parts say why they are missing.
func readSession(ctx context.Context, cl *client.Client, id string, events int) (*sessionView, error) {
	base := "/v1/sessions/" + url.PathEscape(id)
	get := func(path string, q url.Values, out any) error { return cl.Do(ctx, http.MethodGet, path, q, nil, out) }
	var sess struct {
		Session json.RawMessage `json:"session"`
	}
	if err := get(base, nil, &sess); err != nil {
		return nil, err
	}
	v := &sessionView{Session: sess.Session, Leases: []json.RawMessage{}, Events: []json.RawMessage{}}
	var cp struct {
		Checkpoint json.RawMessage `json:"checkpoint"`
	}
	switch err := get(base+"/checkpoints/latest", nil, &cp); {
	case err == nil:
		v.Checkpoint = cp.Checkpoint
	case !isCode(err, "not_found"):
		return nil, err
	}
	var pe *client.Error
	switch err := get(base+"/resume", nil, &v.Resume); {
	case errors.As(err, &pe) && (pe.Status == http.StatusForbidden || pe.Code == "not_found"):
		v.ResumeError = pe.Body
	case err != nil:
		return nil, err
	}
	var leases client.Page[json.RawMessage]
	q := url.Values{"session_id": {id}, "state": {string(checkpointd.LeaseHeld)}, "limit": {strconv.Itoa(showMaxLeases)}}
	if err := get("/v1/leases", q, &leases); err != nil {
		return nil, err
	}
	v.Leases = append(v.Leases, leases.Items...)
	if events > 0 {
		var err error
		if v.Events, err = lastEvents(ctx, cl, base+"/events", events); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// lastEvents walks the event log (oldest first, by pages of 500) to its
// end, keeping the last n.
func lastEvents(ctx context.Context, cl *client.Client, path string, n int) ([]json.RawMessage, error) {
	var last []json.RawMessage
	cursor := ""
	for range showMaxEventPages {
		q := url.Values{"limit": {"500"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var p client.Page[json.RawMessage]
		if err := cl.Do(ctx, http.MethodGet, path, q, nil, &p); err != nil {
			return nil, err
		}
		last = append(last, p.Items...)
		if len(last) > n {
			last = last[len(last)-n:]
		}
		if p.NextCursor == "" || len(p.Items) == 0 {
			break
		}
		cursor = p.NextCursor
	}
	if last == nil {
		last = []json.RawMessage{}
	}
	return last, nil
}

// decoded is a sessionView's parts decoded for a person.
type decoded struct {
	session    checkpointd.Session
	checkpoint *checkpointd.Checkpoint
	resume     *client.Resume
	resumeErr  *client.Error
	leases     []checkpointd.Lease
	events     []checkpointd.Event
}

func decodeView(v *sessionView) (*decoded, error) {
	d := &decoded{}
	if err := json.Unmarshal(v.Session, &d.session); err != nil {
		return nil, fmt.Errorf("sessions show: unreadable session: %w", err)
	}
	if len(v.Checkpoint) > 0 && string(v.Checkpoint) != "null" {
		d.checkpoint = new(checkpointd.Checkpoint)
		if err := json.Unmarshal(v.Checkpoint, d.checkpoint); err != nil {
			return nil, fmt.Errorf("sessions show: unreadable checkpoint: %w", err)
		}
	}
	if len(v.Resume) > 0 && string(v.Resume) != "null" {
		d.resume = new(client.Resume)
		if err := json.Unmarshal(v.Resume, d.resume); err != nil {
			return nil, fmt.Errorf("sessions show: unreadable resume verdict: %w", err)
		}
	}
	if len(v.ResumeError) > 0 {
		d.resumeErr = new(client.Error)
		_ = json.Unmarshal(v.ResumeError, d.resumeErr)
	}
	for _, raw := range v.Leases {
		var l checkpointd.Lease
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, fmt.Errorf("sessions show: unreadable lease: %w", err)
		}
		d.leases = append(d.leases, l)
	}
	for _, raw := range v.Events {
		var e checkpointd.Event
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("sessions show: unreadable event: %w", err)
		}
		d.events = append(d.events, e)
	}
	return d, nil
}
