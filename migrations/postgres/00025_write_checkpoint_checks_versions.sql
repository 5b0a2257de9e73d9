-- +goose Up
-- The one-statement checkpoint write (store/onestatement.go) no longer
-- judges: the caller judged the write (checkpointd.JudgeWrite) on the
-- evidence it last saw for the session, and the statement only checks that
-- the evidence is still what it was, by version, and applies. The evidence
-- and its versions: the session row at the checkpoint seq before this one,
-- with the run, fencing token, repo, role and binding the caller checked
-- and the verdict it judged from (validity and its reason); every lease the
-- document names held by the run at its fencing token; and the live ref
-- the session is bound to (branch before PR, as store.liveRef) at the
-- version the caller judged (none: p_live_ref ''). Anything else declines
-- without a trace: when the session row does not match nothing is written
-- (declined = 'row'); what it learns after updating the row (a lease, the
-- live ref, the claim) it declines by raising SQLSTATE CK001 with the
-- reason as message, which rolls the write back whole. The caller then runs
-- the full transaction, which judges again and answers.
-- Replaces 00019 and 00021 (dropped: an older binary finds no function and
-- writes every checkpoint by the transaction).
DROP FUNCTION IF EXISTS checkpointd_write_checkpoints;
DROP FUNCTION IF EXISTS checkpointd_write_checkpoint;
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

-- Several sessions' writes in one call and one transaction, each in a
-- subtransaction of its own, as 00021 did (store/writebatch.go says why
-- and how the arguments come).
-- +goose StatementBegin
CREATE FUNCTION checkpointd_write_checkpoints(
    p_session text[], p_run text[], p_token bigint[], p_repo text[], p_role text[], p_seq bigint[],
    p_now bigint[], p_seen_before bigint[],
    p_pr bigint[], p_branch text[], p_worktree text[], p_head text[],
    p_stage text[], p_waiting_on text[], p_next_actor text[],
    p_lease_ids text[], p_lease_tokens text[],
    p_complete boolean[], p_missing text[],
    p_ws_branch text[], p_digest text[], p_redactions integer[],
    p_documents text, p_sealeds text, p_document_digest text[],
    p_event_kind text[], p_event_datas text, p_repo_key text[],
    p_validity text[], p_reason text[], p_live_ref text[], p_live_version bigint[],
    p_idem_scope text[], p_idem_key text[], p_idem_claim text[], p_idem_status integer[], p_idem_responses text
) RETURNS TABLE (n integer, validity text, declined text) LANGUAGE plpgsql AS $$
DECLARE
    w record;
    p_document text[] := string_to_array(p_documents, E'\x1e');
    p_sealed text[] := string_to_array(p_sealeds, E'\x1e');
    p_event_data text[] := string_to_array(p_event_datas, E'\x1e');
    p_idem_response text[] := string_to_array(p_idem_responses, E'\x1e');
BEGIN
    IF cardinality(p_document) <> cardinality(p_session) OR cardinality(p_sealed) <> cardinality(p_session)
        OR cardinality(p_event_data) <> cardinality(p_session)
        OR cardinality(p_idem_response) NOT IN (0, cardinality(p_session)) THEN
        RAISE EXCEPTION 'checkpointd_write_checkpoints: the joined values do not split into one per write';
    END IF;
    PERFORM set_config('lock_timeout', '10ms', true);
    FOR i IN 1 .. coalesce(cardinality(p_session), 0) LOOP
        n := i;
        BEGIN
            SELECT * INTO w FROM checkpointd_write_checkpoint(
                p_session[i], p_run[i], p_token[i], p_repo[i], p_role[i], p_seq[i],
                p_now[i], p_seen_before[i],
                NULLIF(p_pr[i], 0), NULLIF(p_branch[i], ''), NULLIF(p_worktree[i], ''), p_head[i],
                p_stage[i], p_waiting_on[i], p_next_actor[i],
                p_lease_ids[i]::text[], p_lease_tokens[i]::bigint[],
                p_complete[i], p_missing[i],
                p_ws_branch[i], p_digest[i], p_redactions[i],
                p_document[i], p_sealed[i], p_document_digest[i],
                p_event_kind[i], p_event_data[i], p_repo_key[i],
                p_validity[i], p_reason[i], p_live_ref[i], p_live_version[i],
                NULLIF(p_idem_scope[i], ''), NULLIF(p_idem_key[i], ''), NULLIF(p_idem_claim[i], ''), p_idem_status[i],
                NULLIF(p_idem_response[i], ''));
            validity := w.validity;
            declined := w.declined;
        EXCEPTION
            WHEN SQLSTATE 'CK001' THEN
                validity := NULL; declined := SQLERRM;
            WHEN OTHERS THEN
                -- Not a decline: the transaction runs it again and answers
                -- whatever it meets (a conflict it retries, an error).
                validity := NULL; declined := 'error ' || SQLSTATE;
        END;
        RETURN NEXT;
    END LOOP;
END $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS checkpointd_write_checkpoints;
DROP FUNCTION IF EXISTS checkpointd_write_checkpoint;
