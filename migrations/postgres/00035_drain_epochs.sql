-- +goose Up
-- Drain readiness relative to a drain's start without touching every
-- session at the start (it updated every active row: seconds at 100k, all
-- of them locked meanwhile). Each drain takes the next epoch; each
-- checkpoint write records the epoch it was written in (the latest
-- drain's). A session whose latest checkpoint is older than the running
-- drain's epoch blocks it though drain_ready still says true: the store
-- counts and lists those through sessions_written_before (store/drain.go),
-- and a background pass resets their drain_ready in batches, after which
-- they are found through sessions_drain_blocking as before. Drains before
-- this migration keep epoch 0: their start reset the sessions already.
ALTER TABLE drains ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
CREATE INDEX drains_epoch ON drains (epoch);
ALTER TABLE sessions ADD COLUMN checkpoint_epoch BIGINT NOT NULL DEFAULT 0;
-- The sessions with a run that say drain_ready, by the epoch of their
-- latest checkpoint: the range before the running drain's epoch is what the
-- reset pass resets, and its valid part what blocks the drain outside
-- sessions_drain_blocking (validity in the key: counted from the index
-- alone). A write changes checkpoint_epoch once per drain at most, so its
-- update stays HOT on PostgreSQL.
CREATE INDEX sessions_written_before ON sessions (checkpoint_epoch, validity, id)
    WHERE state = 'active' AND drain_ready AND current_run_id <> '';

-- The one-statement write records the epoch too (00025's function, with
-- checkpoint_epoch set; the batch function calls it).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION checkpointd_write_checkpoint(
    p_session text, p_run text, p_token bigint, p_repo text, p_role text, p_seq bigint,
    p_now bigint, p_seen_before bigint,
    p_pr bigint, p_branch text, p_worktree text, p_head text,
    p_stage text, p_waiting_on text, p_next_actor text,
    p_lease_ids text[], p_lease_tokens bigint[],
    p_complete boolean, p_missing text,
    p_ws_branch text, p_digest text, p_redactions integer,
    p_document text, p_sealed text, p_document_digest text,
    p_event_kind text, p_event_data text, p_repo_key text,
    p_validity text, p_reason text, p_live_ref text, p_live_version bigint,
    p_idem_scope text, p_idem_key text, p_idem_claim text, p_idem_status integer, p_idem_response text,
    OUT validity text, OUT declined text
) LANGUAGE plpgsql AS $$
DECLARE
    s_branch text;
    s_pr bigint;
    s_event_seq bigint;
    live_ref text;
    live_version bigint;
BEGIN
    UPDATE sessions SET
        checkpoint_seq = p_seq,
        event_seq = event_seq + 1,
        updated_at = p_now,
        checkpoint_at = p_now,
        worktree = COALESCE(p_worktree, worktree),
        head = p_head,
        stage = p_stage,
        waiting_on = p_waiting_on,
        next_actor = p_next_actor,
        run_seen_at = CASE WHEN run_seen_at < p_seen_before THEN p_now ELSE run_seen_at END,
        write_failed_at = NULL,
        write_failed_code = '',
        leases_ok = TRUE,
        latest_complete = p_complete,
        latest_missing = p_missing,
        drain_ready = p_complete,
        checkpoint_epoch = (SELECT COALESCE(MAX(d.epoch), 0) FROM drains d)
    WHERE id = p_session AND state = 'active' AND current_run_id <> '' AND current_run_id = p_run AND run_seq = p_token
        AND repo = p_repo AND role = p_role AND checkpoint_seq = p_seq - 1
        AND (p_pr IS NULL OR p_pr = pr) AND (p_branch IS NULL OR p_branch = branch)
        AND sessions.validity = p_validity AND validity_reason = p_reason
    RETURNING branch, pr, event_seq INTO s_branch, s_pr, s_event_seq;
    IF NOT FOUND THEN
        declined := 'row'; RETURN;
    END IF;
    -- No query when the document names no lease (that alone cost ~10 % of
    -- the statement).
    IF cardinality(p_lease_ids) > 0 THEN
        IF EXISTS (SELECT 1 FROM unnest(p_lease_ids, p_lease_tokens) AS c(id, token)
                WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.id = c.id AND l.run_id = p_run
                    AND l.state = 'held' AND l.expires_at > p_now AND l.fencing_token = c.token)) THEN
            RAISE EXCEPTION USING ERRCODE = 'CK001', MESSAGE = 'lease';
        END IF;
    END IF;
    SELECT l.ref, l.version INTO live_ref, live_version FROM live_refs l
    WHERE l.repo_key = p_repo_key AND l.state <> ''
        AND l.ref IN (CASE WHEN s_branch <> '' THEN 'branch:' || s_branch END, CASE WHEN s_pr > 0 THEN 'pr:' || s_pr END)
    ORDER BY l.ref LIKE 'branch:%' DESC LIMIT 1;
    IF COALESCE(live_ref, '') <> p_live_ref OR COALESCE(live_version, 0) <> p_live_version THEN
        RAISE EXCEPTION USING ERRCODE = 'CK001', MESSAGE = 'live';
    END IF;
    IF p_idem_key IS NOT NULL THEN
        UPDATE idempotency SET claim = '', status = p_idem_status, response = p_idem_response
        WHERE scope = p_idem_scope AND idem_key = p_idem_key AND claim = p_idem_claim;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'CK001', MESSAGE = 'idempotency';
        END IF;
    END IF;
    INSERT INTO checkpoints (session_id, seq, parent_seq, run_id, fencing_token, created_at, stage,
        branch, head, digest, redactions, complete, missing, document, sealed, document_digest)
    VALUES (p_session, p_seq, NULLIF(p_seq - 1, 0), p_run, p_token, p_now, p_stage,
        p_ws_branch, p_head, p_digest, p_redactions, p_complete, p_missing, p_document, p_sealed, p_document_digest);
    INSERT INTO events (session_id, seq, at, kind, run_id, data)
    VALUES (p_session, s_event_seq, p_now, p_event_kind, p_run, p_event_data);
    validity := p_validity;
END $$;
-- +goose StatementEnd

-- +goose Down
-- 00025's function again, before the column it sets goes.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION checkpointd_write_checkpoint(
    p_session text, p_run text, p_token bigint, p_repo text, p_role text, p_seq bigint,
    p_now bigint, p_seen_before bigint,
    p_pr bigint, p_branch text, p_worktree text, p_head text,
    p_stage text, p_waiting_on text, p_next_actor text,
    p_lease_ids text[], p_lease_tokens bigint[],
    p_complete boolean, p_missing text,
    p_ws_branch text, p_digest text, p_redactions integer,
    p_document text, p_sealed text, p_document_digest text,
    p_event_kind text, p_event_data text, p_repo_key text,
    p_validity text, p_reason text, p_live_ref text, p_live_version bigint,
    p_idem_scope text, p_idem_key text, p_idem_claim text, p_idem_status integer, p_idem_response text,
    OUT validity text, OUT declined text
) LANGUAGE plpgsql AS $$
DECLARE
    s_branch text;
    s_pr bigint;
    s_event_seq bigint;
    live_ref text;
    live_version bigint;
BEGIN
    UPDATE sessions SET
        checkpoint_seq = p_seq,
        event_seq = event_seq + 1,
        updated_at = p_now,
        checkpoint_at = p_now,
        worktree = COALESCE(p_worktree, worktree),
        head = p_head,
        stage = p_stage,
        waiting_on = p_waiting_on,
        next_actor = p_next_actor,
        run_seen_at = CASE WHEN run_seen_at < p_seen_before THEN p_now ELSE run_seen_at END,
        write_failed_at = NULL,
        write_failed_code = '',
        leases_ok = TRUE,
        latest_complete = p_complete,
        latest_missing = p_missing,
        drain_ready = p_complete
    WHERE id = p_session AND state = 'active' AND current_run_id <> '' AND current_run_id = p_run AND run_seq = p_token
        AND repo = p_repo AND role = p_role AND checkpoint_seq = p_seq - 1
        AND (p_pr IS NULL OR p_pr = pr) AND (p_branch IS NULL OR p_branch = branch)
        AND sessions.validity = p_validity AND validity_reason = p_reason
    RETURNING branch, pr, event_seq INTO s_branch, s_pr, s_event_seq;
    IF NOT FOUND THEN
        declined := 'row'; RETURN;
    END IF;
    -- No query when the document names no lease (that alone cost ~10 % of
    -- the statement).
    IF cardinality(p_lease_ids) > 0 THEN
        IF EXISTS (SELECT 1 FROM unnest(p_lease_ids, p_lease_tokens) AS c(id, token)
                WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.id = c.id AND l.run_id = p_run
                    AND l.state = 'held' AND l.expires_at > p_now AND l.fencing_token = c.token)) THEN
            RAISE EXCEPTION USING ERRCODE = 'CK001', MESSAGE = 'lease';
        END IF;
    END IF;
    SELECT l.ref, l.version INTO live_ref, live_version FROM live_refs l
    WHERE l.repo_key = p_repo_key AND l.state <> ''
        AND l.ref IN (CASE WHEN s_branch <> '' THEN 'branch:' || s_branch END, CASE WHEN s_pr > 0 THEN 'pr:' || s_pr END)
    ORDER BY l.ref LIKE 'branch:%' DESC LIMIT 1;
    IF COALESCE(live_ref, '') <> p_live_ref OR COALESCE(live_version, 0) <> p_live_version THEN
        RAISE EXCEPTION USING ERRCODE = 'CK001', MESSAGE = 'live';
    END IF;
    IF p_idem_key IS NOT NULL THEN
        UPDATE idempotency SET claim = '', status = p_idem_status, response = p_idem_response
        WHERE scope = p_idem_scope AND idem_key = p_idem_key AND claim = p_idem_claim;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'CK001', MESSAGE = 'idempotency';
        END IF;
    END IF;
    INSERT INTO checkpoints (session_id, seq, parent_seq, run_id, fencing_token, created_at, stage,
        branch, head, digest, redactions, complete, missing, document, sealed, document_digest)
    VALUES (p_session, p_seq, NULLIF(p_seq - 1, 0), p_run, p_token, p_now, p_stage,
        p_ws_branch, p_head, p_digest, p_redactions, p_complete, p_missing, p_document, p_sealed, p_document_digest);
    INSERT INTO events (session_id, seq, at, kind, run_id, data)
    VALUES (p_session, s_event_seq, p_now, p_event_kind, p_run, p_event_data);
    validity := p_validity;
END $$;
-- +goose StatementEnd
DROP INDEX sessions_written_before;
ALTER TABLE sessions DROP COLUMN checkpoint_epoch;
DROP INDEX drains_epoch;
ALTER TABLE drains DROP COLUMN epoch;
