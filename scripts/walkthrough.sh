#!/usr/bin/env bash
# The README's walkthrough: an agent's session, evidence, a takeover, a
# drain. Run it at the repository root against a daemon started with a
# webhook secret:
#
#   CHECKPOINTD_WEBHOOK_SECRET=demo-secret go run ./cmd/checkpointd serve
#   bash scripts/walkthrough.sh
#
# Needs curl, jq and openssl. It may run again and again against the same
# daemon: it ends the session it made, its webhook deliveries have ids of
# their own, and a drain it started is cancelled if a step fails.
# TestReadmeWalkthrough runs it twice in a row.
set -euo pipefail
API=${CHECKPOINTD_URL:-http://127.0.0.1:8080}
SECRET=${WEBHOOK_SECRET:-demo-secret}
if command -v checkpointd >/dev/null; then
  ckd() { checkpointd "$@"; }
else
  ckd() { go run ./cmd/checkpointd "$@"; }
fi
for tool in curl jq openssl; do
  command -v "$tool" >/dev/null || { echo "walkthrough: needs $tool" >&2; exit 1; }
done
step() { printf '\n== %s\n' "$*"; }

# An agent token, scoped to one owner (the operator token could do all of this too).
AGENT=$(ckd token create --role agent --name demo-agent --scope 'acme/*' | tail -n1)
H=(-H "Authorization: Bearer $AGENT" -H 'Content-Type: application/json')

# A branch of this run's own: a run after this one starts where nothing
# has vouched for its head yet, as this one does.
BRANCH=fix-12-$(date +%s%N | tail -c 9)

step "1. Create a session and its first run"
SESSION=$(curl -fsS "${H[@]}" "$API/v1/sessions" -d '{
  "repo": "acme/widgets", "role": "author", "issue": 12, "branch": "'"$BRANCH"'",
  "agent": {"runtime": "claude-code", "provider": "anthropic", "model": "claude", "instance": "host-7/pid-4411"}
}')
SID=$(jq -r .session.id <<<"$SESSION"); RUN=$(jq -r .run.id <<<"$SESSION")
echo "session $SID, run $RUN"

DRAINING=
cleanup() {
  status=$?
  if [ "$status" -ne 0 ] && [ -n "$DRAINING" ]; then
    echo "walkthrough: a step failed; cancelling the drain it started" >&2
    ckd drain cancel >&2 || true
  fi
}
trap cleanup EXIT

step "2. Write a checkpoint (on every stage transition and before a drain)"
HEAD=0123456789abcdef0123456789abcdef01234567
checkpoint() {   # RUN_ID FENCING_TOKEN STAGE
  curl -sS "${H[@]}" "$API/v1/sessions/$SID/checkpoints" -d '{
    "schema_version": 1, "run_id": "'"$1"'", "fencing_token": '"$2"',
    "identity": {"runtime": "claude-code"}, "role": "author", "stage": "'"$3"'",
    "target": {"repo": "acme/widgets", "issue": 12},
    "workspace": {"worktree": "/srv/agents/w1", "branch": "'"$BRANCH"'", "head": "'"$HEAD"'", "base": "main"},
    "next_action": {"actor": "author", "action": "run the tests"},
    "recovery": {"instructions": "git fetch && git checkout '"$BRANCH"', then run make test"}}'
}
checkpoint "$RUN" 1 implementing | jq '.checkpoint | {seq, complete, missing, validity}'
# → complete, validity "unverified": nothing has vouched for the branch's head yet

step "3. The agent crashed: a new run takes over; the old run is fenced off"
TAKEOVER=$(curl -fsS "${H[@]}" "$API/v1/sessions/$SID/runs" \
  -d '{"takeover": true, "if_run": "'"$RUN"'", "reason": "agent restarted", "agent": {"runtime": "claude-code"}}')
RUN2=$(jq -r .run.id <<<"$TAKEOVER"); TOKEN2=$(jq -r .run.fencing_token <<<"$TAKEOVER")
checkpoint "$RUN" 1 testing | jq .code
# → "run_superseded"

step "4. Resume: the latest checkpoint and whether it can be trusted"
curl -fsS "${H[@]}" "$API/v1/sessions/$SID/resume" | jq '{resumable, validity, explanations}'
# → resumable false: unverified, no live head observed yet

step "5. Evidence: the forge says the branch is at HEAD (a push delivery, signed with the secret)"
BODY='{"ref":"refs/heads/'"$BRANCH"'","before":"1111111111111111111111111111111111111111","after":"'$HEAD'","repository":{"id":7,"full_name":"acme/widgets"}}'
SIG=$(printf %s "$BODY" | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1)
curl -fsS "$API/webhooks/gitea" -H 'Content-Type: application/json' -H 'X-Gitea-Event: push' \
  -H "X-Gitea-Delivery: demo-$SID" -H "X-Gitea-Signature: $SIG" -d "$BODY" | jq -c .effects
curl -fsS "${H[@]}" "$API/v1/sessions/$SID/resume" | jq '{resumable, validity}'
# → "resumable": true, "validity": "valid"

step "6. Drain before a deploy: it completes once every active session holds a fresh, complete, valid checkpoint"
ckd drain start --reason "deploy demo"
DRAINING=1
ckd drain status      # blocking: no_checkpoint_since_drain, TO UNBLOCK write_checkpoint
checkpoint "$RUN2" "$TOKEN2" testing | jq '.checkpoint | {seq, complete, validity}'
ckd drain complete    # → completed: safe to stop the daemon
ckd drain cancel      # lift it here instead of restarting
DRAINING=

step "History and the audit log"
curl -fsS "${H[@]}" "$API/v1/sessions/$SID/checkpoints" | jq -c '.items[] | {seq, stage, complete}'
curl -fsS "${H[@]}" "$API/v1/sessions/$SID/events" | jq -r '.items[] | "\(.seq) \(.kind)"'

step "7. The work is done: the agent ends its session (its leases go with it)"
curl -fsS "${H[@]}" "$API/v1/sessions/$SID/end" -d '{"run_id": "'"$RUN2"'", "outcome": "completed"}' | jq -c '.session | {id, state}'
