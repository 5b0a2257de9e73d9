-- +goose Up
-- The common checkpoint write in one statement (store/onestatement.go):
-- one round trip and no BEGIN/COMMIT instead of six statements. It is the
-- transaction store.WriteCheckpoint runs, for the case that transaction
-- answers with a new checkpoint and changes nothing but the session row,
-- the checkpoint, its event and an Idempotency-Key's response: the caller
-- predicted the seq (it sealed the document for it) and the validity (it
-- rendered its answer with it), the run and binding are the ones the
-- caller checked, every lease the document names is held, nothing moves
-- to another ref, the verdict on validity is the one the session already
-- has, and a claimed key is still the request's. On anything else it
-- declines without a trace, and the caller runs the full transaction,
-- which answers exactly as before: when the session row does not match,
-- nothing is written (declined = 'row'); what it learns after updating the
-- row (a lease, the validity, the claim) it declines by raising SQLSTATE
-- CK001 with the reason as message, which rolls the statement back whole.
-- Else it returns the validity it judged.
-- VOLATILE (the default): under READ COMMITTED each statement inside sees
-- a fresh snapshot, so the live ref is read after the session row is
-- locked, as the transaction reads it.
-- +goose StatementBegin
CREATE FUNCTION checkpointd_write_checkpoint(
    p_session text, p_run text, p_token bigint, p_repo text, p_role text, p_seq bigint,
    p_now bigint, p_seen_before bigint,
    p_pr bigint, p_branch text, p_worktree text, p_head text,
    p_stage text, p_waiting_on text, p_next_actor text,
    p_lease_ids text[], p_lease_tokens bigint[],
    p_complete boolean, p_missing text,
    p_ws_branch text, p_digest text, p_redactions integer,
    p_document text, p_sealed text, p_document_digest text,
    p_event_kind text, p_event_data text, p_repo_key text, p_no_live_reason text,
    p_validity text,
    p_idem_scope text, p_idem_key text, p_idem_claim text, p_idem_status integer, p_idem_response text,
    OUT validity text, OUT declined text
) LANGUAGE plpgsql AS $$
DECLARE
    s sessions%ROWTYPE;
    live_head text;
    live_state text;
    judged text;
    judged_reason text := '';
BEGIN
    -- Everything the row says, checked by the write itself: no row, no write.
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
        AND (p_pr IS NULL OR p_pr = pr) AND (p_branch IS NULL OR p_branch = branch) AND sessions.validity <> 'invalidated'
    RETURNING * INTO s;
    IF NOT FOUND THEN
        declined := 'row'; RETURN;
    END IF;
    -- Every lease the document names held at its token (no query when it
    -- names none: that alone cost ~10 % of the statement).
    IF cardinality(p_lease_ids) > 0 THEN
        IF EXISTS (SELECT 1 FROM unnest(p_lease_ids, p_lease_tokens) AS c(id, token)
                WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.id = c.id AND l.run_id = p_run
                    AND l.state = 'held' AND l.expires_at > p_now AND l.fencing_token = c.token)) THEN
            RAISE EXCEPTION USING ERRCODE = 'CK001', MESSAGE = 'lease';
        END IF;
    END IF;
    SELECT l.head, l.state INTO live_head, live_state FROM live_refs l
    WHERE l.repo_key = p_repo_key AND l.state <> ''
        AND l.ref IN (CASE WHEN s.branch <> '' THEN 'branch:' || s.branch END, CASE WHEN s.pr > 0 THEN 'pr:' || s.pr END)
    ORDER BY l.ref LIKE 'branch:%' DESC LIMIT 1;
    IF NOT FOUND THEN
        judged := 'unverified'; judged_reason := p_no_live_reason;
    ELSIF live_state = 'open' AND p_head <> '' AND p_head = live_head THEN
        judged := 'valid';
    ELSE
        RAISE EXCEPTION USING ERRCODE = 'CK001', MESSAGE = 'validity';
    END IF;
    IF judged <> s.validity OR judged_reason <> s.validity_reason OR judged <> COALESCE(p_validity, judged) THEN
        RAISE EXCEPTION USING ERRCODE = 'CK001', MESSAGE = 'validity';
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
    VALUES (p_session, s.event_seq, p_now, p_event_kind, p_run, p_event_data);
    validity := judged;
END $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION checkpointd_write_checkpoint;
