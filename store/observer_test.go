package store_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// recordingObserver keeps what the store told it, as "kind cause/to n".
type recordingObserver struct {
	mu  sync.Mutex
	got []string
}

func (o *recordingObserver) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, s)
}

func (o *recordingObserver) ValidityChanged(cause string, to checkpointd.Validity, n int) {
	o.add(fmt.Sprintf("validity %s/%s %d", cause, to, n))
}
func (o *recordingObserver) LeaseEvent(kind string)   { o.add("lease " + kind) }
func (o *recordingObserver) StoreError(op string)     { o.add("error " + op) }
func (o *recordingObserver) RefSettled(time.Duration) { o.add("settled") }
func (o *recordingObserver) StoreRetry(reason string) { o.add("retry " + reason) }

func (o *recordingObserver) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.got
	o.got = nil
	slices.Sort(out)
	return out
}

// TestObserverSeesCommittedChanges: the observer hears, by cause, what a
// call changed once it committed — not a new reason for the same
// validity, not a duplicate delivery — and every database failure by
// class.
func TestObserverSeesCommittedChanges(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.SystemClock{})
		obs := &recordingObserver{}
		s.SetObserver(obs)
		var ids []string
		for _, br := range []string{"a", "b", "c"} {
			sess, err := s.CreateSession(ctx, store.NewSession{Repo: "acme/widgets", Role: "author", Branch: br})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, sess.ID)
		}
		expect := func(step string, want ...string) {
			t.Helper()
			if got := obs.take(); !slices.Equal(got, want) {
				t.Errorf("%s: observer heard %q, want %q", step, got, want)
			}
		}
		expect("create")

		// A push moves a ref: its sessions are settled after, once.
		push := []checkpointd.Observation{{Repo: "acme/widgets", Branch: "c", Head: headA, Source: "webhook:d0"}}
		if _, _, err := s.ApplyDelivery(ctx, store.DeliveryRecord{ID: "d0", Event: "push", Forge: "gitea", Repo: "acme/widgets"}, push); err != nil {
			t.Fatal(err)
		}
		expect("push")
		for range 2 {
			if err := s.Settle(ctx); err != nil {
				t.Fatal(err)
			}
		}
		expect("settle", "settled") // c has no checkpoint: unverified it stays

		gone := []checkpointd.Observation{{Repo: "acme/widgets", Branch: "a", End: checkpointd.RefDeleted, Source: "webhook:d1"}}
		if _, _, err := s.ApplyDelivery(ctx, store.DeliveryRecord{ID: "d1", Event: "delete", Forge: "gitea", Repo: "acme/widgets"}, gone); err != nil {
			t.Fatal(err)
		}
		expect("delivery", "validity webhook/invalidated 1")
		if _, dup, err := s.ApplyDelivery(ctx, store.DeliveryRecord{ID: "d1", Event: "delete", Forge: "gitea", Repo: "acme/widgets"}, gone); err != nil || !dup {
			t.Fatalf("redelivery: dup %v, %v", dup, err)
		}
		expect("redelivery")

		if _, err := s.Observe(ctx, []checkpointd.Observation{{Repo: "acme/widgets", Branch: "b", End: checkpointd.RefDeleted,
			Authoritative: true, Source: "reconcile:p1"}}); err != nil {
			t.Fatal(err)
		}
		expect("reconcile", "validity reconcile/invalidated 1")

		// c is unverified already: a new reason is no transition.
		if _, err := s.MarkUnverified(ctx, []store.ActiveRef{{Repo: "acme/widgets", Branch: "c"}}, "the forge answered 503", "reconcile:p2"); err != nil {
			t.Fatal(err)
		}
		expect("new reason")

		if _, err := s.ResetValidity(ctx, "restart"); err != nil {
			t.Fatal(err)
		}
		expect("restart") // every session is unverified or invalidated already

		s.Close()
		if _, err := s.GetSession(ctx, ids[2]); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Fatalf("read on a closed store: %v", err)
		}
		if _, err := s.CreateSession(ctx, store.NewSession{Repo: "acme/widgets", Role: "author"}); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Fatalf("write on a closed store: %v", err)
		}
		if err := s.Ping(ctx); !errors.Is(err, checkpointd.ErrStoreUnavailable) {
			t.Fatalf("ping on a closed store: %v", err)
		}
		expect("closed store", "error ping", "error read", "error write")
	})
}
