package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// heldSettle is the real store whose Settle first waits for the test to
// let it go, and then fails or settles.
type heldSettle struct {
	*store.Store
	release chan struct{}
	fail    bool
	done    chan error
}

func (h *heldSettle) Settle(ctx context.Context) error {
	var err error
	select {
	case <-h.release:
		err = errors.New("settle failed (test)")
		if !h.fail {
			err = h.Store.Settle(ctx)
		}
	case <-time.After(10 * time.Second):
		err = errors.New("never released")
	}
	h.done <- err
	return err
}

// TestAnswerBeforeSettle: the forge has the whole answer, with the
// sessions it moves counted, while the handler has not yet re-judged them;
// a read in that window settles for itself and is never stale; a settle
// that fails after the answer changes nothing the answer said, and the next
// read settles.
func TestAnswerBeforeSettle(t *testing.T) {
	for _, fail := range []bool{false, true} {
		storetest.Each(t, func(t *testing.T, b storetest.Backend) {
			sc := newScenario(t, b)
			sess := sc.session(0)
			sc.checkpoint(sess, sc.sha("07-push-new-branch.json", "after"))
			sc.ok("07-push-new-branch.json")
			sc.validity(sess, checkpointd.ValidityValid)

			held := &heldSettle{Store: sc.s, release: make(chan struct{}), fail: fail, done: make(chan error, 1)}
			sc.handler.Store = held
			srv := httptest.NewServer(sc.handler)
			defer srv.Close()
			f := loadFixture(t, "gitea/09-push-fast-forward.json")
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/webhooks/gitea", strings.NewReader(f.Body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range f.Headers {
				if k != "Host" && k != "Content-Length" {
					req.Header.Set(k, v)
				}
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body) // returns only once the answer is whole
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"sessions":{"stale":1}`) {
				t.Fatalf("answer %d %s (%v)", resp.StatusCode, body, err)
			}
			if !resp.Close {
				t.Fatal("the answer keeps the connection: the forge's next delivery on it would wait for the settle")
			}
			select {
			case err := <-held.done:
				t.Fatalf("the handler settled (%v) before the answer was read", err)
			default:
			}
			sc.validity(sess, checkpointd.ValidityStale) // settles for itself (Settled)
			close(held.release)
			if err := <-held.done; (err != nil) != fail {
				t.Fatalf("handler's settle after the read: %v", err)
			}
			sc.validity(sess, checkpointd.ValidityStale)
			stale := 0
			for _, e := range sc.events(sess) {
				if e.Kind == checkpointd.EventValidity && strings.Contains(string(e.Data), `"to":"stale"`) {
					stale++
				}
			}
			if stale != 1 {
				t.Fatalf("%d changes to stale in the log, want 1", stale)
			}
		})
	}
}
