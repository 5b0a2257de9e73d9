-- +goose Up
-- Several sessions' one-statement checkpoint writes in one call and one
-- transaction (store/writebatch.go): the writes that arrive while a call
-- is at the database share the next one, as commits share a WAL flush.
-- Each element is one call of checkpointd_write_checkpoint (migration
-- 00019), unchanged, in a block of its own: when it declines (SQLSTATE
-- CK001) or fails, its subtransaction is rolled back whole and the others
-- stand, and its row says why, so the caller answers it with the full
-- transaction as before. A cancel (statement_timeout, the caller's
-- timeout) is no element's to catch: it rolls the whole call back.
--
-- Arguments are arrays with one entry per write, in the order of 00019's;
-- where 00019 takes a NULL for "none" the entry is the zero value ('' or
-- 0, which never means anything else there), and a write's leases are
-- each an array literal (arrays of arrays must be rectangular). The four
-- long ones (the document, the sealed part, the event's data, the
-- response to replay) come instead as one text each, the writes' values
-- joined by U+001E, which none of them can hold (JSON escapes control
-- characters, a sealed one is a key id and base64; the caller checks): no
-- array literal to escape and parse.
--
-- The caller sorts the writes by session, so two calls lock their session
-- rows in the order every other multi-row lock of sessions uses (ORDER BY
-- id). A write whose row another transaction holds does not keep the
-- call's others waiting: past a brief lock_timeout (a competing commit's
-- length) it fails alone, SQLSTATE 55P03, and the transaction writes it,
-- waiting as long as it takes.
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
    p_event_kind text[], p_event_datas text, p_repo_key text[], p_no_live_reason text[],
    p_validity text[],
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
                p_event_kind[i], p_event_data[i], p_repo_key[i], p_no_live_reason[i],
                NULLIF(p_validity[i], ''),
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
DROP FUNCTION checkpointd_write_checkpoints;
