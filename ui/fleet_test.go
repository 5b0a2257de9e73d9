package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/internal/present"
	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/ui"
	"github.com/checkpointd/checkpointd/webhook/webhooktest"
)

// agentSession is a session the test's agent drives over the API.
type agentSession struct {
	id, run, branch string
	token           int64
}

func (c *console) api(t *testing.T, method, path, token string, body any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, c.URL+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return out
}

func (c *console) startSession(t *testing.T, branch, instance string) *agentSession {
	t.Helper()
	r := c.api(t, "POST", "/v1/sessions", c.agent, map[string]any{"repo": "acme/widgets", "role": "author", "branch": branch,
		"agent": map[string]any{"runtime": "claude-code", "model": "claude", "instance": instance}})
	run := r["run"].(map[string]any)
	return &agentSession{id: r["session"].(map[string]any)["id"].(string), run: run["id"].(string), branch: branch,
		token: int64(run["fencing_token"].(float64))}
}

// checkpoint writes a complete checkpoint at head, waiting on waitingOn.
func (c *console) checkpoint(t *testing.T, s *agentSession, head, stage, waitingOn string) {
	t.Helper()
	doc := map[string]any{"schema_version": 1, "run_id": s.run, "fencing_token": s.token, "role": "author", "stage": stage,
		"identity":    map[string]any{"runtime": "claude-code"},
		"target":      map[string]any{"repo": "acme/widgets"},
		"workspace":   map[string]any{"worktree": "/w/" + s.branch, "branch": s.branch, "head": head, "base": "main"},
		"next_action": map[string]any{"actor": "author", "action": "run the tests"},
		"recovery":    map[string]any{"instructions": "git checkout " + s.branch}}
	if waitingOn != "" {
		doc["blocker"] = map[string]any{"kind": "review", "summary": "needs a review", "waiting_on": waitingOn}
	}
	c.api(t, "POST", "/v1/sessions/"+s.id+"/checkpoints", c.agent, doc)
}

// push delivers a signed Gitea push saying branch is at head.
func (c *console) push(t *testing.T, delivery, branch, head string) {
	t.Helper()
	c.pushFrom(t, delivery, branch, strings.Repeat("e", 40), head)
}

// pushFrom is a push that moves branch from before to head.
func (c *console) pushFrom(t *testing.T, delivery, branch, before, head string) {
	t.Helper()
	webhooktest.Push(t, c.URL, webhookSecret, delivery, "acme/widgets", branch, before, head)
}

func head(n byte) string { return strings.Repeat(string("0123456789abcdef"[n%16]), 40) }

// rowText is the fleet row of a session, as the browser shows it.
func rowText(id string) chromedp.Action[string] {
	return chromedp.Text(`//table[contains(@class,"fleet")]//tr[@data-session="` + id + `"]`)
}

// waitRow waits until the session's fleet row contains want.
func waitRow(t *testing.T, ctx context.Context, id, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		got, _ = chromedp.Run(ctx, rowText(id))
		if strings.Contains(got, want) {
			return got
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the row of %s never showed %q; it shows %q", id, want, got)
	return ""
}

// TestFleetAndDrain: the fleet shows a stale and an unresponsive session
// as such; a webhook that makes a session stale reaches the open page
// without a reload; the drain page blocks, then completes after the
// unresponsive session is parked.
func TestFleetAndDrain(t *testing.T) {
	const window = 2 * time.Second
	c := newConsoleDeps(t, window, func(d *ui.Deps) { d.ForgeURL = "https://git.example" })
	// B will be unresponsive: it checkpoints, is verified, then goes quiet.
	b := c.startSession(t, "fix-b", "host-2/pid-2")
	c.checkpoint(t, b, head(2), "testing", "")
	c.push(t, "d-b", "fix-b", head(2))
	quiet := time.Now()
	// The browser starts while B goes quiet: it can take longer than the
	// window on a loaded machine, and A must be read within it.
	ctx := browser(t)
	c.signIn(t, ctx, c.operator)
	time.Sleep(time.Until(quiet.Add(window + 100*time.Millisecond)))
	// A is live and valid, waiting on a reviewer.
	a := c.startSession(t, "fix-a", "host-1/pid-1")
	c.checkpoint(t, a, head(1), "review_requested", "reviewer")
	c.push(t, "d-a", "fix-a", head(1))

	do(t, ctx, chromedp.Navigate(c.URL+"/ui/"))
	rowA := waitRow(t, ctx, a.id, "valid")
	for _, want := range []string{"claude-code", "host-1/pid-1", "live", "review_requested", "complete", "reviewer", "author", "fix-a"} {
		if !strings.Contains(rowA, want) {
			t.Errorf("the row of A lacks %q: %q", want, rowA)
		}
	}
	if rowB := waitRow(t, ctx, b.id, "unresponsive"); !strings.Contains(rowB, "valid") {
		t.Errorf("the row of B: %q", rowB)
	}
	// B, unresponsive, is on top of the list, in its own group.
	if n, _ := chromedp.Run(ctx, chromedp.Nodes(`//tbody[contains(@class,"unresponsive-first")]/tr[@data-session="`+b.id+`"]`, chromedp.AtLeast(0))); len(n) != 1 {
		t.Errorf("B is not among the unresponsive on top (%d rows)", len(n))
	}
	copyID(t, ctx, a.id)
	screenshot(t, ctx, "fleet")

	// The branch of A moves: the open page turns its row stale by itself.
	c.pushFrom(t, "d-a2", "fix-a", head(1), head(3))
	waitRow(t, ctx, a.id, "stale")
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.getAttribute("data-updated") || ""`)); n == "" {
		t.Error("the row changed without the live update (a reload?)")
	}
	copyID(t, ctx, a.id) // the refreshed row's button works too
	// A catches up and is valid again.
	c.checkpoint(t, a, head(3), "addressing_review", "")
	waitRow(t, ctx, a.id, "valid")

	// The drain: both block until A writes and B is parked.
	do(t, ctx, chromedp.Navigate(c.URL+"/ui/drain"), chromedp.WaitVisible(button("Start drain")),
		chromedp.SendKeys(chromedp.ID("reason"), "deploy 2"), chromedp.Click(button("Start drain")),
		chromedp.WaitVisible(chromedp.CSS("table.blocking")))
	blocking := get(t, ctx, chromedp.Text(chromedp.CSS("table.blocking")))
	if !strings.Contains(blocking, present.ShortID(a.id)) || !strings.Contains(blocking, present.ShortID(b.id)) || !strings.Contains(blocking, "park") {
		t.Errorf("blocking: %q", blocking)
	}
	screenshot(t, ctx, "drain")
	c.checkpoint(t, a, head(3), "addressing_review", "")
	do(t, ctx, chromedp.Navigate(c.URL+"/ui/sessions/"+b.id), chromedp.Click(button("Park")),
		chromedp.WaitVisible(button("Confirm")))
	if page := get(t, ctx, chromedp.Text(chromedp.CSS("main"))); !strings.Contains(page, b.id) {
		t.Errorf("the confirmation does not name the session: %q", page)
	}
	do(t, ctx, chromedp.SendKeys(chromedp.ID("reason"), "agent died"), chromedp.Click(button("Confirm")),
		chromedp.WaitVisible(chromedp.CSS(".flash")))
	do(t, ctx, chromedp.Navigate(c.URL+"/ui/drain"), chromedp.WaitVisible(button("Complete drain")),
		chromedp.Click(button("Complete drain")), chromedp.WaitVisible(chromedp.CSS(".flash")))
	if page := get(t, ctx, chromedp.Text(chromedp.CSS("main"))); !strings.Contains(page, "completed") {
		t.Errorf("after complete: %q", page)
	}
	if past := get(t, ctx, chromedp.Text(chromedp.CSS("table.past"))); !strings.Contains(past, "completed · 2/2 ready") || !strings.Contains(past, "deploy 2") {
		t.Errorf("past drains: %q", past)
	}
	screenshot(t, ctx, "drain-completed")
}

// copyID clicks the copy button of the session's fleet row and checks
// that the id went to the clipboard. The clipboard is the page's own
// (navigator.clipboard) with its write recorded: headless Chromium grants
// no clipboard to a page nobody focused.
func copyID(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	btn := `//tr[@data-session="` + id + `"]//button[contains(@class,"copy")]`
	get(t, ctx, chromedp.Evaluate[bool](`window.copied = ""; navigator.clipboard.writeText = function (s) { window.copied = s; return Promise.resolve(); }; true`))
	do(t, ctx, chromedp.WaitVisible(btn), chromedp.Click(btn), chromedp.WaitVisible(btn+`[@data-copied]`))
	if got := get(t, ctx, chromedp.Evaluate[string](`window.copied`)); got != id {
		t.Errorf("the copy button copied %q, want %q", got, id)
	}
}

// TestSessionPage: one session in full — the verdict, the latest
// checkpoint, what changed between two checkpoints, its leases, runs and
// log; an operator sees the actions, a reader none.
func TestSessionPage(t *testing.T) {
	c := newConsole(t)
	s := c.startSession(t, "fix-s", "host-3/pid-3")
	c.api(t, "POST", "/v1/leases", c.agent, map[string]any{"resource": map[string]any{"kind": "pr", "repo": "acme/widgets", "number": 34},
		"session_id": s.id, "run_id": s.run, "ttl_seconds": 600})
	c.checkpoint(t, s, head(1), "implementing", "")
	c.api(t, "POST", "/v1/sessions/"+s.id+"/checkpoints", c.agent, map[string]any{"schema_version": 1, "run_id": s.run,
		"fencing_token": s.token, "role": "author", "stage": "blocked",
		"identity":              map[string]any{"runtime": "claude-code"},
		"target":                map[string]any{"repo": "acme/widgets"},
		"workspace":             map[string]any{"worktree": "/w/fix-s", "branch": "fix-s", "head": head(2), "base": "main"},
		"blocker":               map[string]any{"kind": "decision", "summary": "schema A & B disagree", "waiting_on": "operator"},
		"next_action":           map[string]any{"actor": "operator", "action": "choose a schema", "prompt": "Pick A or B, then resume."},
		"recovery":              map[string]any{"instructions": "check out the branch", "commands": []string{"git fetch origin", "git checkout fix-s"}},
		"pending_mutation":      map[string]any{"kind": "comment", "target": "acme/widgets#34", "idempotency_key": "k-42", "summary": "ask for a decision"},
		"last_completed_action": map[string]any{"kind": "test", "summary": "go test ./... passed"},
		"evidence":              []map[string]any{{"kind": "ci", "ref": "run 7", "summary": "green"}}})
	c.push(t, "d-s", "fix-s", head(2))

	ctx := browser(t)
	c.signIn(t, ctx, c.operator)
	do(t, ctx, chromedp.Navigate(c.URL+"/ui/sessions/"+s.id), chromedp.WaitVisible(chromedp.ID("verdict")))
	page := get(t, ctx, chromedp.Text(chromedp.CSS("main")))
	for _, want := range []string{s.id, "resumable", "valid", "Latest checkpoint",
		"Stage\nblocked", "decision: schema A & B disagree · waiting on operator", "operator: choose a schema", "Pick A or B, then resume.",
		"check out the branch", "git fetch origin\ngit checkout fix-s", "comment on acme/widgets#34: ask for a decision", "idempotency key k-42",
		"test: go test ./... passed", "ci run 7: green", "fix-s at " + head(2)[:7] + " onto main",
		"What changed from #1 to #2", "/stage", "implementing", "/workspace/head", "pr acme/widgets #34", "checkpoint.written",
		"lease.acquired", "run.started", "current"} {
		if !strings.Contains(page, want) {
			t.Errorf("the session page lacks %q", want)
		}
	}
	// The raw document is behind a toggle, with & as itself.
	if strings.Contains(page, `"stage": "blocked"`) {
		t.Error("the raw document shows before its toggle is opened")
	}
	do(t, ctx, chromedp.Click(`//section[@aria-labelledby="latest"]//summary`))
	raw := get(t, ctx, chromedp.Text(`//section[@aria-labelledby="latest"]//pre[contains(@class,"doc")]`))
	if !strings.Contains(raw, `"stage": "blocked"`) || !strings.Contains(raw, `"summary": "schema A & B disagree"`) || strings.Contains(raw, `\u0026`) {
		t.Errorf("the raw document: %s", raw)
	}
	// The log reads as a line per event, its data on demand.
	if line := get(t, ctx, chromedp.Text(`//table[contains(@class,"events")]//tr[.//code[text()="lease.acquired"]]/td[5]`)); !strings.Contains(line, "resource.kind=pr") {
		t.Errorf("the lease.acquired line: %q", line)
	}
	for _, b := range []string{"Park", "End", "Force-clear", "Release"} {
		if n, _ := chromedp.Run(ctx, chromedp.Nodes(button(b), chromedp.AtLeast(0))); len(n) == 0 {
			t.Errorf("an operator sees no %s button", b)
		}
	}
	screenshot(t, ctx, "session")

	reader := browser(t)
	c.signIn(t, reader, c.reader)
	do(t, reader, chromedp.Navigate(c.URL+"/ui/sessions/"+s.id), chromedp.WaitVisible(chromedp.ID("verdict")))
	for _, b := range []string{"Park", "End", "Force-clear", "Release"} {
		if n, _ := chromedp.Run(reader, chromedp.Nodes(button(b), chromedp.AtLeast(0))); len(n) != 0 {
			t.Errorf("a reader sees a %s button", b)
		}
	}
	if text := get(t, reader, chromedp.Text(`//section[@aria-labelledby="verdict"]`)); !strings.Contains(text, "resumable") {
		t.Errorf("a reader's verdict: %q", text)
	}
}

// TestOtherPagesAndPhone: leases, errors and reconcile render for an
// operator; at a phone's width the page does not scroll sideways (wide
// tables scroll inside their box).
func TestOtherPagesAndPhone(t *testing.T) {
	c := newConsole(t)
	s := c.startSession(t, "fix-p", "host-4/pid-4")
	c.api(t, "POST", "/v1/leases", c.agent, map[string]any{"resource": map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": "fix-p"},
		"session_id": s.id, "run_id": s.run, "ttl_seconds": 600})
	c.checkpoint(t, s, head(1), "implementing", "")
	ctx := browser(t)
	c.signIn(t, ctx, c.operator)
	// A time ahead (the lease's expiry, 600 s away) reads as how soon,
	// in the server's text and after live.js rewrites it.
	do(t, ctx, chromedp.Navigate(c.URL+"/ui/leases"), chromedp.WaitVisible(chromedp.CSS("h1")))
	if text := get(t, ctx, chromedp.Text(chromedp.CSS("main table"))); !regexp.MustCompile(`\bin (9|10)m\b`).MatchString(text) || strings.Contains(text, "0s ago") {
		t.Errorf("the lease's expiry should read in 9m or in 10m: %q", text)
	}
	for _, p := range []struct{ path, heading, shows, shot string }{
		{"/ui/leases", "Leases", "branch acme/widgets fix-p", "leases"},
		{"/ui/errors", "Errors", "No errors recorded", "errors"},
		{"/ui/reconcile", "Reconcile", "No reconcile pass has run yet", ""},
	} {
		do(t, ctx, chromedp.Navigate(c.URL+p.path), chromedp.WaitVisible(chromedp.CSS("h1")))
		if h := get(t, ctx, chromedp.Text(chromedp.CSS("h1"))); h != p.heading {
			t.Errorf("%s: heading %q", p.path, h)
		}
		if text := get(t, ctx, chromedp.Text(chromedp.CSS("main"))); !strings.Contains(text, p.shows) {
			t.Errorf("%s lacks %q: %q", p.path, p.shows, text)
		}
		if p.shot != "" {
			screenshot(t, ctx, p.shot)
		}
	}
	// The report reads as tables: the verdicts, and the sessions not valid
	// with why (no forge here: every session is unverified).
	do(t, ctx, chromedp.Click(button("Reconcile now")), chromedp.WaitVisible(chromedp.CSS(".flash")))
	if text := get(t, ctx, chromedp.Text(`//table[contains(@class,"verdicts")]//tr[contains(@class,"v-unverified")]`)); !strings.Contains(text, "unverified\t1") {
		t.Errorf("the verdicts' unverified row: %q", text)
	}
	if text := get(t, ctx, chromedp.Text(chromedp.CSS("table.notvalid"))); !strings.Contains(text, present.ShortID(s.id)) || !strings.Contains(text, "acme/widgets\tunverified") {
		t.Errorf("the sessions not valid: %q", text)
	}
	screenshot(t, ctx, "reconcile")

	do(t, ctx, chromedp.EmulateViewport(390, 844), chromedp.Navigate(c.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("table.fleet")))
	wide := get(t, ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
	if wide {
		t.Error("at a phone's width the fleet page scrolls sideways")
	}
	// The fleet is cards there: rows are blocks, each cell labelled.
	if card := get(t, ctx, chromedp.Evaluate[string](`(function () {
		var tr = document.querySelector("table.fleet tr[data-session]"), td = tr.querySelector("td");
		return getComputedStyle(tr).display + " " + getComputedStyle(document.querySelector("table.fleet thead")).display + " " +
			getComputedStyle(td, "::before").content;
	})()`)); card != `block none "Repo · target"` {
		t.Errorf("the fleet at a phone's width: %s, want rows as blocks, no header, cells labelled", card)
	}
	screenshot(t, ctx, "fleet-phone")
	do(t, ctx, chromedp.Navigate(c.URL+"/ui/sessions/"+s.id), chromedp.WaitVisible(chromedp.CSS("h1")))
	if get(t, ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`)) {
		wider := get(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("main *")].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1).slice(0, 8).map(e => e.tagName + "." + e.className + " in " + e.parentElement.tagName + ": " + e.textContent.slice(0, 30))`))
		t.Errorf("at a phone's width the session page scrolls sideways: %v", wider)
	}
	screenshot(t, ctx, "session-phone")
}

// TestFleetTable: the fleet leads with repo and target linked to the
// forge, shows ids short (the full id on hover and in the copy button),
// commits as 7 digits, the unresponsive sessions on top and once; a
// search takes a short id; the ended tab says how, when, why and by whom.
func TestFleetTable(t *testing.T) {
	clock := checkpointd.NewManualClock(time.Now())
	s := storetest.Open(t, storetest.SQLite, clock)
	c := newConsoleOn(t, s, func(d *ui.Deps) { d.ForgeURL = "https://git.example/" })
	r := c.api(t, "POST", "/v1/sessions", c.agent, map[string]any{"repo": "acme/widgets", "role": "author", "branch": "fix/12",
		"issue": 12, "pr": 34, "agent": map[string]any{"runtime": "claude-code"}})
	run := r["run"].(map[string]any)
	quiet := &agentSession{id: r["session"].(map[string]any)["id"].(string), run: run["id"].(string), branch: "fix/12",
		token: int64(run["fencing_token"].(float64))}
	c.checkpoint(t, quiet, head(7), "implementing", "")
	clock.Advance(checkpointd.DefaultRunLiveness + time.Second)
	fresh := c.startSession(t, "fix-f", "host-9/pid-9")
	ended := c.startSession(t, "fix-e", "host-8/pid-8")
	c.api(t, "POST", "/v1/sessions/"+ended.id+"/end", c.operator, map[string]any{"outcome": "abandoned", "reason": "host died"})

	hc := c.client(t)
	c.login(t, hc, c.operator)
	page := c.send(t, hc, "GET", "/ui/", nil).body
	for _, want := range []string{
		`href="https://git.example/acme/widgets"`, `href="https://git.example/acme/widgets/issues/12"`,
		`href="https://git.example/acme/widgets/pulls/34"`, `href="https://git.example/acme/widgets/src/branch/fix/12"`,
		`href="https://git.example/acme/widgets/commit/` + head(7) + `" title="` + head(7) + `"><code>` + head(7)[:7] + `</code>`,
		`title="` + quiet.id + `"><code>` + present.ShortID(quiet.id) + `</code>`, `data-copy="` + quiet.id + `"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the fleet lacks %s", want)
		}
	}
	if strings.Contains(page, ">"+quiet.id+"<") {
		t.Error("the fleet shows a full session id as text")
	}
	top := strings.Index(page, `class="unresponsive-first"`)
	if top < 0 || strings.Index(page, `data-session="`+quiet.id+`"`) < top ||
		strings.Index(page, `data-session="`+fresh.id+`"`) < strings.Index(page, `data-session="`+quiet.id+`"`) {
		t.Error("the unresponsive session is not on top")
	}
	if n := strings.Count(page, `data-session="`+quiet.id+`"`); n != 1 {
		t.Errorf("the unresponsive session is listed %d times", n)
	}
	if strings.Contains(page, `data-session="`+ended.id+`"`) {
		t.Error("an ended session is in the active tab")
	}

	found := c.send(t, hc, "GET", "/ui/?q="+present.ShortID(fresh.id), nil).body
	if !strings.Contains(found, `data-session="`+fresh.id+`"`) || strings.Contains(found, `data-session="`+quiet.id+`"`) {
		t.Errorf("a search by short id: %s", found)
	}

	tab := c.send(t, hc, "GET", "/ui/?state=ended", nil).body
	for _, want := range []string{`data-session="` + ended.id + `"`, "abandoned", "host died", "console-test-operator", "<time datetime="} {
		if !strings.Contains(tab, want) {
			t.Errorf("the ended tab lacks %q", want)
		}
	}
	if strings.Contains(tab, `data-session="`+fresh.id+`"`) {
		t.Error("an active session is in the ended tab")
	}
}
