-- +goose Up
-- Why an ended session ended and who ended it on its agent's behalf (the
-- operator's name; '' when its own run ended it), kept on the session so
-- a list of ended sessions shows them without reading every session's
-- log. The session.ended event keeps them too; the ones already ended
-- take theirs from it.
ALTER TABLE sessions ADD COLUMN end_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN ended_by TEXT NOT NULL DEFAULT '';
UPDATE sessions SET
    end_reason = COALESCE((SELECT json_extract(e.data, '$.reason') FROM events e
        WHERE e.session_id = sessions.id AND e.kind = 'session.ended' ORDER BY e.seq DESC LIMIT 1), ''),
    ended_by = COALESCE((SELECT json_extract(e.data, '$.by.name') FROM events e
        WHERE e.session_id = sessions.id AND e.kind = 'session.ended' ORDER BY e.seq DESC LIMIT 1), '')
WHERE state = 'ended';

-- +goose Down
ALTER TABLE sessions DROP COLUMN ended_by;
ALTER TABLE sessions DROP COLUMN end_reason;
